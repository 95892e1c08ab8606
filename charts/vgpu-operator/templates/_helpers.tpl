{{- /* The objects' base name: "vgpu-operator", or fullnameOverride (two releases in one cluster
need different names: ClusterRoles and their bindings are cluster-wide). */ -}}
{{- define "vgpu-operator.name" -}}{{ .Values.fullnameOverride | default "vgpu-operator" }}{{- end -}}
{{- define "vgpu-operator.labels" -}}
app.kubernetes.io/name: vgpu-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- /* repository:tag, or repository@digest when image.digest is set (a digest pins the exact
image; the tag is then only for people reading it). */ -}}
{{- define "vgpu-operator.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}
{{- /* An HTTP probe on the /healthz of --liveness: (list $probe $port) */ -}}
{{- define "vgpu-operator.probe" -}}
{{- $probe := index . 0 -}}
httpGet: {path: /healthz, port: {{ index . 1 }}}
initialDelaySeconds: {{ $probe.initialDelaySeconds }}
periodSeconds: {{ $probe.periodSeconds }}
timeoutSeconds: {{ $probe.timeoutSeconds }}
failureThreshold: {{ $probe.failureThreshold }}
{{- end -}}
