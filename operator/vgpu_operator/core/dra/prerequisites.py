"""What a cluster needs before its GPUs can be handed out through NVIDIA's DRA driver: pure
checks over objects read elsewhere, each problem one `Finding` naming what is missing and the fix.

- `dra-api-not-served`: the apiserver does not serve resource.k8s.io/v1 (nothing else is checked
  then: without the API there are no classes, slices or claims);
- `dra-deviceclass`: a DeviceClass of the driver's chart is missing, or selects other devices;
- `dra-node-slices`: a DRA node has no ResourceSlice of the driver, or one without devices;
- `dra-plugin-placement`: the kubelet plugin does not run (Running and Ready) on exactly the DRA
  nodes;
- `dra-second-owner`: a node whose GPUs the driver publishes is also served by NVIDIA's device
  plugin (`nvidia.com/gpu`, `nvidia.com/mig-*` allocatable) or by HAMi's device plugin (its
  `volcano.sh/node-vgpu-register` annotation with its vGPU count allocatable): one GPU could go to
  two pods. The driver's own chart refuses to install its GPU plugin next to the device plugin
  for this reason (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/
  dra-driver-nvidia-gpu/templates/validation.yaml). A plugin counts while kubelet shows its
  resources allocatable: when a plugin goes, kubelet sets their allocatable to 0 at once and
  keeps the capacity for a grace period (kubernetes/kubernetes@v1.35.4:
  pkg/kubelet/cm/devicemanager/manager.go `PluginDisconnected`, `GetCapacity`), and HAMi's
  register annotation stays on the Node for good. From Kubernetes 1.36 a DeviceClass of the
  driver may map `nvidia.com/gpu` onto its devices (core.dra.selectors): on a node whose
  allocatable has `nvidia.com/gpu` a pod asking it still gets the device plugin's GPUs, so the
  device plugin there is a second owner all the same (the message names the mapping).

The driver's name, its kubelet plugin DaemonSet and the resource names HAMi's plugin registers
are what the operator config says (`DraCluster`); the DeviceClass names are the driver chart's
(core.dra.driver).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.dra import driver as chart
from vgpu_operator.core.dra.driver import REQUIRED_CLASSES, RESOURCE_API, RESOURCE_GROUP
from vgpu_operator.core.dra.selectors import extended_resources
from vgpu_operator.models.findings import SEVERITY_ORDER, Finding, ObjectRef, Severity
from vgpu_operator.models.volcano import HARDCODED_ALLOCATABLE, REGISTER_ANNOTATION, registration

Obj = Mapping[str, Any]


def chart_install(namespace: str) -> str:
    """The install command of kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:docs/install.md in
    the configured namespace (the chart refuses its GPU plugin without
    gpuResourcesEnabledOverride, kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/
    dra-driver-nvidia-gpu/templates/validation.yaml)."""
    return (
        "install NVIDIA's DRA driver chart with its GPU plugin (`helm install "
        "dra-driver-nvidia-gpu oci://registry.k8s.io/dra-driver-nvidia/charts/"
        f"dra-driver-nvidia-gpu --namespace {namespace} --set gpuResourcesEnabledOverride=true`)"
    )


# The kubelet plugin's placement values and their default affinity
# (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:deployments/helm/dra-driver-nvidia-gpu/values.yaml).
PLACEMENT_VALUES = (
    "the chart's `kubeletPlugin.nodeSelector`, `kubeletPlugin.affinity` and "
    "`kubeletPlugin.tolerations`; its default affinity wants a label that shows an NVIDIA "
    "GPU, such as `feature.node.kubernetes.io/pci-10de.present=true` (Node Feature Discovery) "
    "or `nvidia.com/gpu.present=true` (NVIDIA's GPU Operator)"
)


@dataclass(frozen=True)
class DraCluster:
    """What the checks read. `served`: the group versions the apiserver serves, as discovery
    lists them ("resource.k8s.io/v1", "apps/v1", ...); `dra_nodes`: the nodes meant to hand out
    their GPUs through DRA; `nodes`: Node objects (allocatable and annotations are read);
    `plugin_pods`: the kubelet plugin's pods (selected by its DaemonSet's label);
    `plugin_daemonset`: that DaemonSet, None when it was not found; `driver`, `plugin_ref`
    (namespace, name): the driver's name and its kubelet plugin DaemonSet as the operator config
    names them; `vgpu_count_names`: the vGPU count resources HAMi's plugin registers (its
    `resourceCountName`, default `volcano.sh/vgpu-number`:
    Project-HAMi/volcano-vgpu-device-plugin@v1.12.0:doc/config.md, registered with kubelet in
    pkg/rm/rm.go `AddGPUResource("*", util.ResourceName)`, the name set in pkg/util/util.go)."""

    served: Collection[str]
    device_classes: Sequence[Obj] = ()
    resource_slices: Sequence[Obj] = ()
    dra_nodes: Collection[str] = ()
    nodes: Sequence[Obj] = ()
    plugin_pods: Sequence[Obj] = ()
    plugin_daemonset: Obj | None = None
    driver: str = chart.DRIVER
    plugin_ref: tuple[str, str] = (chart.PLUGIN_NAMESPACE, chart.PLUGIN_DAEMONSET)
    vgpu_count_names: Collection[str] = (HARDCODED_ALLOCATABLE[0],)


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _node(name: str) -> ObjectRef:
    return ObjectRef(kind="Node", name=name)


def _finding(
    rule: str, severity: Severity, objects: tuple[ObjectRef, ...], message: str, fix: str
) -> Finding:
    return Finding(id=rule, severity=severity, objects=objects, message=message, fix=fix)


# --- the API ---------------------------------------------------------------------------------


def api_served(c: DraCluster) -> Iterator[Finding]:
    if RESOURCE_API in c.served:
        return
    others = sorted(v for v in c.served if v.startswith(f"{RESOURCE_GROUP}/"))
    verb = "is" if len(others) == 1 else "are"
    seen = f"only {', '.join(others)} {verb} served" if others else "no version of it is served"
    yield _finding(
        "dra-api-not-served",
        "error",
        (),
        f"the apiserver does not serve {RESOURCE_API} ({seen}): the driver's DeviceClasses, "
        "ResourceSlices and the pods' ResourceClaims need DRA's GA API, in Kubernetes 1.34 and "
        "later",
        fix="upgrade the control plane to Kubernetes 1.34 or later; on 1.34+ the API was turned "
        f"off: drop `{RESOURCE_API}=false` (or `api/ga=false`) from kube-apiserver's "
        "--runtime-config",
    )


# --- DeviceClasses ---------------------------------------------------------------------------


def _expressions(device_class: Obj) -> list[str]:
    out = []
    for sel in _spec(device_class).get("selectors") or []:
        expression = ((sel or {}).get("cel") or {}).get("expression")
        out.append(" ".join(str(expression).split()) if expression is not None else "")
    return out


def device_classes(c: DraCluster) -> Iterator[Finding]:
    present = {str(_meta(dc).get("name")): dc for dc in c.device_classes}
    wanted = chart.device_classes(c.driver)
    for name, expression in wanted.items():
        ref = ObjectRef(kind="DeviceClass", name=name)
        dc = present.get(name)
        if dc is None:
            required = name in REQUIRED_CLASSES
            use = "pods" if required else "passthrough (vfio) pods"
            yield _finding(
                "dra-deviceclass",
                "error" if required else "warning",
                (ref,),
                f"DeviceClass {name} is missing: {use} whose claims ask for it stay Pending "
                "(the scheduler cannot allocate a claim of an unknown class)",
                fix=f"{chart_install(c.plugin_ref[0])}; it creates the DeviceClasses "
                f"{', '.join(wanted)} (`resources.gpus.enabled`, on by default)",
            )
        elif _expressions(dc) != [expression]:
            found = " && ".join(_expressions(dc)) or "every device"
            yield _finding(
                "dra-deviceclass",
                "warning",
                (ref,),
                f"DeviceClass {name} selects `{found}` where the driver's chart selects "
                f"`{expression}`: its claims get other devices than the chart's class would give",
                fix=f"restore the chart's DeviceClass {name} (`helm upgrade` of the driver's "
                "chart), or delete it and install the chart again",
            )


# --- ResourceSlices --------------------------------------------------------------------------


def _slices_by_node(c: DraCluster) -> dict[str, list[Obj]]:
    """The driver's node-local slices by node, of each pool's newest generation only (older
    generations are on their way out; the scheduler ignores them)."""
    by_node: dict[str, list[Obj]] = {}
    for s in c.resource_slices:
        spec = _spec(s)
        node = spec.get("nodeName")
        if spec.get("driver") == c.driver and node:
            by_node.setdefault(str(node), []).append(s)
    for node, slices in by_node.items():
        newest = max(int((_spec(s).get("pool") or {}).get("generation") or 0) for s in slices)
        by_node[node] = [
            s for s in slices if int((_spec(s).get("pool") or {}).get("generation") or 0) == newest
        ]
    return by_node


def _device_count(slices: Sequence[Obj]) -> int:
    return sum(len(_spec(s).get("devices") or []) for s in slices)


def node_slices(c: DraCluster) -> Iterator[Finding]:
    by_node = _slices_by_node(c)
    for node in sorted(c.dra_nodes):
        slices = by_node.get(node)
        if not slices:
            yield _finding(
                "dra-node-slices",
                "error",
                (_node(node),),
                f"DRA node {node} has no ResourceSlice of driver {c.driver}: no claim can be "
                "allocated there (its kubelet plugin has not published the node's GPUs)",
                fix=f"make the kubelet plugin run on {node} (see dra-plugin-placement) and check "
                f"its log (`kubectl logs -n {c.plugin_ref[0]} <plugin pod on {node}>`): it "
                "publishes the slice once it has found the GPUs",
            )
        elif _device_count(slices) == 0:
            yield _finding(
                "dra-node-slices",
                "warning",
                (_node(node),),
                f"DRA node {node}'s ResourceSlice of driver {c.driver} lists no device: the plugin "
                "found no GPU it can hand out (a GPU with MIG mode on but no MIG instance is "
                "announced through its instances only)",
                fix="create the node's MIG instances, or turn MIG mode off on GPUs meant to be "
                "handed out whole; the plugin publishes its devices when it starts",
            )


# --- the kubelet plugin ----------------------------------------------------------------------


def _ready(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if _meta(pod).get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _pod_state(pod: Obj) -> str:
    status = pod.get("status") or {}
    if _meta(pod).get("deletionTimestamp"):
        return "terminating"
    phase = status.get("phase") or "Pending"
    return "not Ready" if phase == "Running" else str(phase)


def plugin_placement(c: DraCluster) -> Iterator[Finding]:
    ds = c.plugin_daemonset
    ds_ref = (
        ObjectRef.of("DaemonSet", ds)
        if ds is not None
        else ObjectRef(kind="DaemonSet", name=c.plugin_ref[1], namespace=c.plugin_ref[0])
    )
    if ds is None and not c.plugin_pods:
        if c.dra_nodes:
            yield _finding(
                "dra-plugin-placement",
                "error",
                (ds_ref,),
                f"the kubelet plugin of driver {c.driver} is not installed (no DaemonSet "
                f"{ds_ref.namespace}/{ds_ref.name}, no plugin pod): nothing publishes the DRA "
                f"nodes' GPUs and nothing prepares their claims ({len(c.dra_nodes)} DRA nodes)",
                fix=chart_install(c.plugin_ref[0]),
            )
        return
    pods_on: dict[str, list[Obj]] = {}
    for pod in c.plugin_pods:
        node = _spec(pod).get("nodeName")
        if node:
            pods_on.setdefault(str(node), []).append(pod)
    running = {node for node, pods in pods_on.items() if any(_ready(p) for p in pods)}
    for node in sorted(set(c.dra_nodes) - running):
        pods = pods_on.get(node)
        if pods:
            states = ", ".join(f"{ObjectRef.of('Pod', p)} is {_pod_state(p)}" for p in pods)
            why = f"its pod is not serving ({states})"
            fix = f"see why in `kubectl describe` and the pod's log on {node}"
        else:
            why = "the DaemonSet has no pod there"
            fix = f"let the DaemonSet's placement admit {node}: {PLACEMENT_VALUES}"
        yield _finding(
            "dra-plugin-placement",
            "error",
            (ds_ref, _node(node)),
            f"the kubelet plugin of driver {c.driver} does not run on DRA node {node}: {why}; "
            "kubelet cannot prepare the claims allocated there and the node's slice is not kept "
            "current",
            fix=fix,
        )
    for node in sorted(running - set(c.dra_nodes)):
        yield _finding(
            "dra-plugin-placement",
            "warning",
            (ds_ref, _node(node)),
            f"the kubelet plugin of driver {c.driver} runs on {node}, which is not a DRA node: it "
            f"publishes {node}'s GPUs for claims, next to whatever else serves them",
            fix="narrow the DaemonSet's placement to the DRA nodes (a nodeSelector on a label only "
            f"they carry: {PLACEMENT_VALUES}), or make {node} a DRA node",
        )


# --- one owner per GPU -----------------------------------------------------------------------


def _count(quantity: Any) -> int:
    """A device count from a quantity ("8"); one that does not read as a whole number counts
    as present."""
    text = str(quantity).strip()
    return int(text) if text.isdigit() else 1


def _allocatable(node: Obj) -> dict[str, int]:
    """The node's allocatable extended resources that kubelet shows registered (above 0)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {str(k): n for k, v in allocatable.items() if (n := _count(v)) > 0}


def _device_plugin_resources(node: Obj) -> dict[str, int]:
    return {
        k: v
        for k, v in _allocatable(node).items()
        if k == contract.NVIDIA_GPU_RESOURCE or k.startswith("nvidia.com/mig-")
    }


def _mapped(c: DraCluster, resources: Collection[str]) -> str:
    """What the driver's DeviceClasses say of these resources, for the message: the classes that
    map one of them onto the driver's devices (Kubernetes 1.36+)."""
    mapped = extended_resources(c.device_classes, c.driver)
    said = [
        f"DeviceClass {', '.join(mapped[r])} maps {r} onto the driver's devices, yet a pod asking "
        f"{r} gets the device plugin's GPUs on a node whose allocatable has it (KEP-5004)"
        for r in sorted(resources)
        if r in mapped
    ]
    return f" ({'; '.join(said)})" if said else ""


def second_owners(c: DraCluster) -> Iterator[Finding]:
    by_node = _slices_by_node(c)
    published = {n for n, slices in by_node.items() if _device_count(slices) > 0}
    running = {str(_spec(p).get("nodeName")) for p in c.plugin_pods if _ready(p)}
    nodes = {str(_meta(n).get("name")): n for n in c.nodes}
    for name in sorted((set(c.dra_nodes) | published | running) & set(nodes)):
        node = nodes[name]
        if name in published:
            dra = f"driver {c.driver} publishes them ({_device_count(by_node[name])} devices)"
        else:
            dra = f"they are meant for driver {c.driver}"
        registered = _device_plugin_resources(node)
        if registered:
            listed = ", ".join(f"{k}: {v}" for k, v in sorted(registered.items()))
            yield _finding(
                "dra-second-owner",
                "error",
                (_node(name),),
                f"{name}'s GPUs have two owners: NVIDIA's device plugin registers {listed} and "
                f"{dra}; kubelet and the DRA scheduler each hand out the same GPU"
                f"{_mapped(c, registered)}",
                fix=f"keep NVIDIA's device plugin off {name} (its DaemonSet's placement, or the "
                "GPU Operator's node label `nvidia.com/gpu.deploy.device-plugin=false`); the "
                "DRA driver's chart assumes it is not there (`gpuResourcesEnabledOverride`)",
            )
        vgpus = {k: v for k, v in _allocatable(node).items() if k in c.vgpu_count_names}
        if registration(node) is not None and vgpus:
            listed = ", ".join(f"{k}: {v}" for k, v in sorted(vgpus.items()))
            yield _finding(
                "dra-second-owner",
                "error",
                (_node(name),),
                f"{name}'s GPUs have two owners: HAMi's device plugin has registered them "
                f"({REGISTER_ANNOTATION}, {listed}) and {dra}; Volcano and the DRA scheduler "
                "each hand out the same GPU",
                fix=f"keep HAMi's device plugin off {name} (take the node out of its vGPU pool, "
                f"whose label `{contract.LABEL_DEVICE_PLUGIN}` places the plugin): kubelet "
                "withdraws its vGPU resources once it has gone",
            )


def check(c: DraCluster) -> list[Finding]:
    """Every finding, errors first; only the API's when the API is not served."""
    found = list(api_served(c))
    if not found:
        found = [
            *device_classes(c),
            *node_slices(c),
            *plugin_placement(c),
            *second_owners(c),
        ]
    return sorted(
        found, key=lambda f: (SEVERITY_ORDER[f.severity], f.id, [str(o) for o in f.objects])
    )
