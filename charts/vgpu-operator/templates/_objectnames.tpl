{{- /*
The Volcano/HAMi objects the controller reads and writes, by namespace, from .Values.config (the
same values the operator configuration is rendered from, configmap.yaml): the ConfigMaps of
`configmap_refs` in controller/snapshot.py (the scheduler conf, the device and node configs, the
Ascend ones, and volcano-vgpu-device-config in both namespaces the device plugin looks in), the
plugin DaemonSets and the scheduler Deployment; and the ConfigMaps it only reads
(`read_only_configmap_refs`: NVIDIA's device plugin configs, config.nvidiaDevicePluginConfig).
The Roles (rbac-roles.yaml) and the admission policies (admission-policies.yaml) are built from
this one list.
Output: YAML {namespace: {configmaps: [names], daemonsets: [names], deployments: [names],
readConfigmaps: [names]}}.
*/ -}}
{{- /* The plugin DaemonSets the operator places: HAMi's two, and with config.dra the DRA
driver's kubelet plugin (its defaults as models/config_dra.py has them). */ -}}
{{- define "vgpu-operator.daemonsets" -}}
{{- $c := .Values.config -}}
{{- $out := list $c.devicePlugin $c.ascendDevicePlugin -}}
{{- if kindIs "map" $c.dra -}}
{{- $dra := dict "namespace" "dra-driver-nvidia-gpu" "name" "dra-driver-nvidia-gpu-kubelet-plugin" -}}
{{- $out = append $out (merge (deepCopy ($c.dra.kubeletPluginDaemonSet | default dict)) $dra) -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- define "vgpu-operator.objects" -}}
{{- $c := .Values.config -}}
{{- $m := dict -}}
{{- $readOnly := list -}}
{{- with $c.nvidiaDevicePluginConfig }}{{ $readOnly = append $readOnly . }}{{ end -}}
{{- $byKind := dict
  "configmaps" (list $c.scheduler.configMap $c.deviceConfig $c.nodeConfig $c.ascendNodeConfig $c.ascendVnpu.schedulerDevice (dict "namespace" "kube-system" "name" "volcano-vgpu-device-config") (dict "namespace" "volcano-system" "name" "volcano-vgpu-device-config"))
  "daemonsets" (include "vgpu-operator.daemonsets" . | fromYamlArray)
  "deployments" (list $c.scheduler.deployment)
  "readConfigmaps" $readOnly -}}
{{- range $kind := list "configmaps" "daemonsets" "deployments" "readConfigmaps" }}
{{- range $ref := get $byKind $kind }}
{{- if or (eq (toString $ref.namespace) "auto") (eq (toString $ref.name) "auto") }}
{{- fail (printf "config: %s/%s is 'auto', but the chart grants access to these objects by name: run `vgpu-operator doctor --discover` against the cluster and set the namespace and name it prints" (toString $ref.namespace) (toString $ref.name)) }}
{{- end }}
{{- if not (hasKey $m $ref.namespace) }}
{{- $_ := set $m $ref.namespace (dict "configmaps" (list) "daemonsets" (list) "deployments" (list) "readConfigmaps" (list)) }}
{{- end }}
{{- $entry := get $m $ref.namespace }}
{{- $_ := set $entry $kind (append (get $entry $kind) $ref.name | uniq) }}
{{- end }}
{{- end }}
{{- toYaml $m }}
{{- end -}}
