{{- define "vgpu-operator.name" -}}vgpu-operator{{- end -}}
{{- define "vgpu-operator.labels" -}}
app.kubernetes.io/name: vgpu-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- define "vgpu-operator.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{- end -}}
