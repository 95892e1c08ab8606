{{- /*
The controller's Node writes, key by key: variables and validations that admission-policies.yaml
includes into vgpu-operator-objects (whose matchConditions name the controller's ServiceAccount
and whose matchConstraints hold Node UPDATEs). Each validation passes any other request.

A Node update by the controller may add or change only:
- labels: the node contract's labels it sets (vgpu.volcano.sh/policy, /mode, /device-plugin),
  the GPU Operator's per-node switches it writes (nvidia.com/gpu.deploy.*, listed below), and
  the keys of .Values.config.policyKeys.labels (an entry ending in `/` is a prefix);
- taints: the keys of .Values.config.policyKeys.taints;
- annotations: the node contract's annotations it writes (vgpu.volcano.sh/owned, /target,
  /config, /rollout, /retained); no other annotation is added, changed or removed;
- spec.unschedulable (cordon), which these rules do not look at (the objects policy's own Node
  rule holds ownerReferences, finalizers, podCIDR(s), providerID and configSource).
It may also change or remove a label or taint that the stored Node's ownership record lists
(oldObject's annotation vgpu.volcano.sh/owned: what the operator set there, JSON as
operator/vgpu_operator/models/node.py `Owned` writes it), so a key that left the list is still
released; never one under kubernetes.io/ or k8s.io/, whatever the record says. CEL has no JSON
parser here: the record is searched with regular expressions. A label is listed when its key is
a member name of the object `"labels": {...}`; a taint when an object of the list
`"taints": [...]` has its key and effect (either order, any spacing). A label key or value, a
taint key or effect holds no `"`, `{`, `}` or `]`, so neither pattern can reach past the object
or list it is about; a key's only regular-expression character, `.`, is escaped.

The operator checks policies against the same list (operator/vgpu_operator/core/nodes/
policy_keys.py, which also holds the contract's keys and switches below; a unit test holds
the two equal) and refuses a policy that asks for another key, so these rules refuse only what
the controller's code never sends.
*/ -}}
{{- define "vgpu-operator.nodeKeys.lists" -}}
{{- $keys := .Values.config.policyKeys -}}
{{- if not (kindIs "map" $keys) -}}
{{- fail "config.policyKeys: set the node label and taint keys policies may use, {labels: [...], taints: [...]} (keys, or prefixes ending in /); the chart's default lists the project's own (volcano.sh/, ascend)" -}}
{{- end -}}
{{- $labels := list "vgpu.volcano.sh/policy" "vgpu.volcano.sh/mode" "vgpu.volcano.sh/device-plugin" "nvidia.com/gpu.deploy.client" "nvidia.com/gpu.deploy.dcgm" "nvidia.com/gpu.deploy.dcgm-exporter" "nvidia.com/gpu.deploy.device-plugin" "nvidia.com/gpu.deploy.gpu-feature-discovery" "nvidia.com/gpu.deploy.mig-manager" "nvidia.com/gpu.deploy.nvsm" -}}
{{- $labelPrefixes := list -}}
{{- range ($keys.labels | default list) -}}
{{- if hasSuffix "/" . }}{{ $labelPrefixes = append $labelPrefixes . }}{{ else }}{{ $labels = append $labels . }}{{ end -}}
{{- end -}}
{{- $taints := list -}}
{{- $taintPrefixes := list -}}
{{- range ($keys.taints | default list) -}}
{{- if hasSuffix "/" . }}{{ $taintPrefixes = append $taintPrefixes . }}{{ else }}{{ $taints = append $taints . }}{{ end -}}
{{- end -}}
{{- dict "labels" $labels "labelPrefixes" $labelPrefixes "taints" $taints "taintPrefixes" $taintPrefixes "annotations" (list "vgpu.volcano.sh/owned" "vgpu.volcano.sh/target" "vgpu.volcano.sh/config" "vgpu.volcano.sh/rollout" "vgpu.volcano.sh/retained") | toJson -}}
{{- end -}}

{{- define "vgpu-operator.nodeKeys.variables" -}}
{{- $_ := include "vgpu-operator.nodeKeys.lists" . -}}
- name: nodeNewLabels
  expression: "request.resource.resource == 'nodes' && has(object.metadata.labels) ? object.metadata.labels : {}"
- name: nodeOldLabels
  expression: "request.resource.resource == 'nodes' && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}"
- name: nodeNewAnnotations
  expression: "request.resource.resource == 'nodes' && has(object.metadata.annotations) ? object.metadata.annotations : {}"
- name: nodeOldAnnotations
  expression: "request.resource.resource == 'nodes' && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"
- name: nodeNewTaints
  expression: "request.resource.resource == 'nodes' && has(object.spec.taints) ? object.spec.taints : []"
- name: nodeOldTaints
  expression: "request.resource.resource == 'nodes' && has(oldObject.spec.taints) ? oldObject.spec.taints : []"
- name: nodeRecord
  expression: >-
    'vgpu.volcano.sh/owned' in variables.nodeOldAnnotations
    ? variables.nodeOldAnnotations['vgpu.volcano.sh/owned'] : ''
{{- end -}}

{{- define "vgpu-operator.nodeKeys.validations" -}}
{{- $l := include "vgpu-operator.nodeKeys.lists" . | fromJson -}}
{{- $system := "'^([^/]*\\\\.)?(kubernetes\\\\.io|k8s\\\\.io)/'" -}}
{{- $labelListed := printf "(k in %s || %s.exists(p, k.startsWith(p)))" (toJson $l.labels) (toJson $l.labelPrefixes) -}}
{{- $labelRecorded := printf `(!k.matches(%s) && variables.nodeRecord.matches('"labels"\\s*:\\s*\\{[^}]*"' + k.replace('.', '\\.') + '"\\s*:'))` $system -}}
{{- $labelKept := "(k in variables.nodeOldLabels && variables.nodeOldLabels[k] == variables.nodeNewLabels[k])" -}}
{{- $labelSet := printf "(%s || %s || (k in variables.nodeOldLabels && %s))" $labelKept $labelListed $labelRecorded -}}
{{- $labelGone := printf "(k in variables.nodeNewLabels || %s || %s)" $labelListed $labelRecorded -}}
{{- $taintListedFmt := printf "(@T@.key in %s || %s.exists(p, @T@.key.startsWith(p)))" (toJson $l.taints) (toJson $l.taintPrefixes) -}}
{{- $taintsAt := `"taints"\\s*:\\s*\\[[^\\]]*\\{[^{}]*` -}}
{{- $effectIs := `"effect"\\s*:\\s*"' + @T@.effect + '"` -}}
{{- $keyIs := `"key"\\s*:\\s*"' + @T@.key.replace('.', '\\.') + '"` -}}
{{- $taintRecordedFmt := printf `(!@T@.key.matches(%s) && variables.nodeRecord.matches('%s%s[^{}]*%s|%s%s[^{}]*%s'))` $system $taintsAt $effectIs $keyIs $taintsAt $keyIs $effectIs -}}
{{- $taintKept := "variables.nodeOldTaints.exists(o, o.key == t.key && o.effect == t.effect && o.?value.orValue('') == t.?value.orValue('') && o.?timeAdded == t.?timeAdded)" -}}
{{- $taintThere := "variables.nodeOldTaints.exists(o, o.key == t.key && o.effect == t.effect)" -}}
{{- $taintSet := printf "(%s || %s || (%s && %s))" $taintKept ($taintListedFmt | replace "@T@" "t") $taintThere ($taintRecordedFmt | replace "@T@" "t") -}}
{{- $taintGone := printf "(variables.nodeNewTaints.exists(t, t.key == o.key && t.effect == o.effect) || %s || %s)" ($taintListedFmt | replace "@T@" "o") ($taintRecordedFmt | replace "@T@" "o") -}}
{{- $annotationKept := "(k in variables.nodeOldAnnotations && variables.nodeOldAnnotations[k] == variables.nodeNewAnnotations[k])" -}}
- expression: >-
    request.resource.resource != 'nodes'
    || (variables.nodeNewLabels.all(k, {{ $labelSet }})
        && variables.nodeOldLabels.all(k, {{ $labelGone }}))
  messageExpression: >-
    'vgpu-operator may add or change on Node ' + request.name + ' only the node contract labels
    it sets, the GPU Operator switches and the keys of config.policyKeys.labels, and remove only
    those or a label its ownership record (vgpu.volcano.sh/owned) lists; not: '
    + (variables.nodeNewLabels.filter(k, !{{ $labelSet }})
       + variables.nodeOldLabels.filter(k, !{{ $labelGone }})).join(', ')
  reason: Forbidden
- expression: >-
    request.resource.resource != 'nodes'
    || (variables.nodeNewTaints.all(t, {{ $taintSet }})
        && variables.nodeOldTaints.all(o, {{ $taintGone }}))
  messageExpression: >-
    'vgpu-operator may add or change on Node ' + request.name + ' only taints with the keys of
    config.policyKeys.taints, and remove only those or a taint its ownership record
    (vgpu.volcano.sh/owned) lists; not: '
    + (variables.nodeNewTaints.filter(t, !{{ $taintSet }}).map(t, t.key + ':' + t.effect)
       + variables.nodeOldTaints.filter(o, !{{ $taintGone }}).map(o, o.key + ':' + o.effect)).join(', ')
  reason: Forbidden
- expression: >-
    request.resource.resource != 'nodes'
    || (variables.nodeNewAnnotations.all(k, {{ $annotationKept }} || k in {{ toJson $l.annotations }})
        && variables.nodeOldAnnotations.all(k, k in variables.nodeNewAnnotations || k in {{ toJson $l.annotations }}))
  messageExpression: >-
    'vgpu-operator may add, change or remove on Node ' + request.name + ' only the node contract
    annotations it writes ({{ join ", " $l.annotations }}); not: '
    + (variables.nodeNewAnnotations.filter(k, !({{ $annotationKept }} || k in {{ toJson $l.annotations }}))
       + variables.nodeOldAnnotations.filter(k, !(k in variables.nodeNewAnnotations || k in {{ toJson $l.annotations }}))).join(', ')
  reason: Forbidden
{{- end -}}
