{{- /* The objects' base name: "vgpu-operator", or fullnameOverride (two releases in one cluster
need different names: ClusterRoles and their bindings are cluster-wide). */ -}}
{{- define "vgpu-operator.name" -}}{{ .Values.fullnameOverride | default "vgpu-operator" }}{{- end -}}
{{- define "vgpu-operator.labels" -}}
app.kubernetes.io/name: vgpu-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
{{- /* The image's repository, its registry replaced by global.imageRegistry when that is set
(a mirror or an air-gapped registry). The registry is the first path element when it looks like
a host (a '.' or ':' in it, or localhost), as the container runtimes read it. */ -}}
{{- define "vgpu-operator.repository" -}}
{{- $repo := .Values.image.repository -}}
{{- $registry := ((.Values.global | default dict).imageRegistry | default "") | trimSuffix "/" -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" $registry $repo -}}
{{- end -}}
{{- $repo -}}
{{- end -}}
{{- /* repository:tag, or repository@digest when image.digest is set (a digest pins the exact
image; the tag is then only for people reading it). Every pod of the chart uses it. */ -}}
{{- define "vgpu-operator.image" -}}
{{- if .Values.image.digest -}}
{{ include "vgpu-operator.repository" . }}@{{ .Values.image.digest }}
{{- else -}}
{{ include "vgpu-operator.repository" . }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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
{{- /*
The admission policies' hash: the sha256 of admission-policies.yaml as these values render it,
without the hash itself. The chart writes it into each policy and binding there (the annotation
of "vgpu-operator.admissionPolicies.annotations") and into the operator configuration with the
policies' names ("vgpu-operator.admissionPolicies.config", configmap.yaml); the controller writes
nothing until the objects in the cluster carry the hash its configuration holds, and are
enforced (operator/vgpu_operator/core/admission/verdict.py). The file is rendered again here
with the key `vgpuAdmissionHashing` in its context, which leaves the annotation out: the same
text whichever template asks, and no recursion.
*/ -}}
{{- define "vgpu-operator.admissionPolicies.rendered" -}}
{{- $context := dict "Values" .Values "Release" .Release "Chart" .Chart "Template" .Template "vgpuAdmissionHashing" true -}}
{{- include (print .Template.BasePath "/admission-policies.yaml") $context -}}
{{- end -}}
{{- define "vgpu-operator.admissionPolicies.annotations" -}}
{{- if not (hasKey . "vgpuAdmissionHashing") -}}
vgpu.volcano.sh/admission-policies-hash: {{ include "vgpu-operator.admissionPolicies.rendered" . | sha256sum | quote }}
{{- end -}}
{{- end -}}
{{- /* admissionPolicies of the operator configuration: {hash, names} (models/config_admission.py);
the names are those of the ValidatingAdmissionPolicies rendered (each binding has its policy's). */ -}}
{{- define "vgpu-operator.admissionPolicies.config" -}}
{{- $rendered := include "vgpu-operator.admissionPolicies.rendered" . -}}
{{- $names := list -}}
{{- range regexSplit "(?m)^---\\s*$" $rendered -1 -}}
{{- $doc := fromYaml . -}}
{{- if eq (toString (get $doc "kind")) "ValidatingAdmissionPolicy" -}}
{{- $names = append $names $doc.metadata.name -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "hash" ($rendered | sha256sum) "names" $names) -}}
{{- end -}}
