"""Rules on the device plugin DaemonSets: flags by version (reference §1.2, §3.1, §3.3, seed 002
§3.3), placement on managed nodes, the node-config mount, and competing NVIDIA plugins."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from vgpu_operator import contract
from vgpu_operator.core.render.plugin_args import desired_flags
from vgpu_operator.core.rules import facts
from vgpu_operator.core.rules.base import (
    Issue,
    ObjectRef,
    cm_ref,
    error,
    info,
    rule,
    warning,
)
from vgpu_operator.core.rules.placement import (
    Placement,
    placement_patch_text,
    placements,
    selector_problem,
    taint_text,
    untolerated,
)
from vgpu_operator.core.rules.snapshot import (
    ClusterSnapshot,
    Obj,
    annotations_of,
    labels_of,
    meta,
    name_of,
    pod_done,
)
from vgpu_operator.models.node import Owned
from vgpu_operator.models.volcano import VOLCANO_PREFIX
from vgpu_operator.models.volcano_views import ContainerView, Version, WorkloadView

DEFAULT_FLAG_NAMES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-cores")
NUMERIC_FLAGS = {
    "device-split-count": "deviceSplitCount",
    "device-cores-scaling": "deviceCoreScaling",
    "gpu-memory-factor": "gpuMemoryFactor",
}
FLAG_DEFAULTS = {"device-split-count": 2.0, "device-cores-scaling": 1.0, "gpu-memory-factor": 1.0}


@dataclass(frozen=True)
class PluginNames:
    count: str
    memory: str
    cores: str
    source: str  # "flags" or "ConfigMap ns/name"


def registered_name(name: str, version: Version | None) -> str:
    """The kubelet resource name a plugin registers for a configured name (§3.3)."""
    prefixes = version is None or facts.plugin_prefixes_names(version)
    if prefixes and name and not name.startswith(VOLCANO_PREFIX):
        return VOLCANO_PREFIX + name
    return name


def plugin_names(s: ClusterSnapshot) -> PluginNames | None:
    """The kubelet resource names the vGPU plugin registers, or None without a plugin."""
    c = s.plugin_container
    if c is None:
        return None
    v = c.version
    if v is not None and facts.plugin_takes_name_flags(v):
        flags = c.flags
        values: list[str] = [
            flags[f].value or default if f in flags else default
            for f, default in zip(
                ("resource-name", "resource-memory-name", "resource-core-name"),
                DEFAULT_FLAG_NAMES,
                strict=True,
            )
        ]
        return PluginNames(values[0], values[1], values[2], "flags")
    src = s.plugin_device_config
    n = src.nvidia
    if n is None:
        return None
    return PluginNames(
        registered_name(n.resource_count_name or "", v),
        registered_name(n.resource_memory_name or "", v),
        registered_name(n.resource_core_name or "", v),
        f"ConfigMap {src.namespace}/{src.name}",
    )


def plugin_factor(s: ClusterSnapshot) -> int:
    """The gpuMemoryFactor the plugin applies (flag, else its ConfigMap; 0/absent counts as 1)."""
    c = s.plugin_container
    flag = c.flags.get("gpu-memory-factor") if c else None
    if flag is not None and flag.value and flag.value.isdigit():
        return max(1, int(flag.value))
    if c is not None and c.version is not None and facts.plugin_flags_always_override(c.version):
        return 1
    n = s.plugin_device_config.nvidia
    return max(1, n.gpu_memory_factor or 1) if n else 1


def _ds_ref(s: ClusterSnapshot) -> ObjectRef:
    ref = s.config.device_plugin
    return ObjectRef(kind="DaemonSet", name=ref.name, namespace=ref.namespace)


@rule("plugin-resource-name-flags", "plugin ≤ v1.11 registers the names the scheduler counts")
def check_name_flags(s: ClusterSnapshot) -> Iterator[Issue]:
    c = s.plugin_container
    if c is None or c.version is None or not facts.plugin_takes_name_flags(c.version):
        return
    names = plugin_names(s)
    assert names is not None
    sched = s.scheduler_nvidia
    src = s.scheduler_device_config
    pairs = [("--resource-name", names.count, sched.resource_count_name or "", "resourceCountName")]
    if c.version >= Version(1, 9, 4):
        pairs.append(
            (
                "--resource-memory-name",
                names.memory,
                sched.resource_memory_name or "",
                "resourceMemoryName",
            )
        )
        pairs.append(
            (
                "--resource-core-name",
                names.cores,
                sched.resource_core_name or "",
                "resourceCoreName",
            )
        )
    wanted = desired_flags(c.version, s.config)
    for flag, plugin_value, sched_value, key in pairs:
        if plugin_value == sched_value:
            continue
        given = flag.lstrip("-") in c.flags
        yield error(
            _ds_ref(s),
            f"plugin {c.version} registers {plugin_value} "
            f"({flag} {'given' if given else 'not given: its default'}), but the scheduler "
            f"counts {sched_value or '(nothing)'} (from {src.namespace}/{src.name}"
            f"{'' if src.parsed else ', built-in default'}): pods requesting either are bound "
            "without device annotations and fail with UnexpectedAdmissionError (device request "
            "not found)",
            fix=f"make them agree (seed 002 §5.1: three places): pass "
            f"{flag}={wanted[flag.lstrip('-')]} and keep {key} of the scheduler's ConfigMap the "
            f"same, or, if {plugin_value} is intended, point the scheduler at a ConfigMap whose "
            f"{key} is {plugin_value}",
            fixable=True,
        )


@rule("plugin-config-flags-override", "no plugin flag silently overrides the ConfigMap")
def check_flag_override(s: ClusterSnapshot) -> Iterator[Issue]:
    c = s.plugin_container
    n = s.plugin_device_config.nvidia
    if c is None or n is None:
        return
    always = c.version is not None and facts.plugin_flags_always_override(c.version)
    for flag, key in NUMERIC_FLAGS.items():
        cm_value = {
            "deviceSplitCount": n.device_split_count,
            "deviceCoreScaling": n.device_core_scaling,
            "gpuMemoryFactor": n.gpu_memory_factor,
        }[key]
        given = c.flags.get(flag)
        if given is None and not always:
            continue
        if (
            given is None
            and key == "gpuMemoryFactor"
            and not facts.plugin_takes_memory_factor_flag(c.version or Version(0, 0))
        ):
            continue  # no such flag before v1.9.4
        try:
            value = float(given.value) if given and given.value else FLAG_DEFAULTS[flag]
        except ValueError:
            continue
        if cm_value is not None and float(cm_value) == value:
            if given is not None and not always:
                yield info(
                    _ds_ref(s),
                    f"--{flag}={given.value} is given explicitly: later edits of {key} in the "
                    "ConfigMap will be ignored by the plugin",
                    fix=f"remove --{flag} from the plugin's args",
                )
            continue
        how = "given" if given is not None else "not given, so its default applies:"
        yield warning(
            _ds_ref(s),
            f"--{flag} is {how} {value:g}, which overrides {key}="
            f"{cm_value if cm_value is not None else '(unset)'} of the ConfigMap on every node "
            "without its own node-config value",
            fix=f"set --{flag} to the ConfigMap's value"
            if always
            else f"remove --{flag} from the plugin's args",
            fixable=always,
        )


@rule("plugin-resource-name-prefix", "resource names are in volcano.sh/ (plugin ≥ v1.12)")
def check_prefix(s: ClusterSnapshot) -> Iterator[Issue]:
    c = s.plugin_container
    n = s.plugin_device_config.nvidia
    if c is None or n is None:
        return
    if c.version is not None and not facts.plugin_prefixes_names(c.version):
        return
    src = s.plugin_device_config
    for key, name in (
        ("resourceCountName", n.resource_count_name),
        ("resourceMemoryName", n.resource_memory_name),
        ("resourceCoreName", n.resource_core_name),
    ):
        if name and not name.startswith(VOLCANO_PREFIX):
            assumed = "" if c.version else " (version unknown from the image tag: assumed ≥ v1.12)"
            yield error(
                (_ds_ref(s), cm_ref(src.namespace, src.name)),
                f"{key} is {name}: the plugin{assumed} registers it as {VOLCANO_PREFIX}{name}, "
                "not the name pods request and the scheduler counts",
                fix="use a volcano.sh/ name (the defaults volcano.sh/vgpu-* are safest)",
            )


def _owned_taints(node: Obj) -> set[str]:
    try:
        owned = Owned.from_annotation(annotations_of(node).get("vgpu.volcano.sh/owned"))
    except ValueError:
        return set()
    return {f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in owned.taints}


def _node_role(s: ClusterSnapshot, name: str) -> str:
    """Why a node reached by a plugin DaemonSet needs no HAMi plugin, for messages."""
    node = s.node(name)
    rc = s.released(node) if node is not None else None
    if rc is None:
        return f"{name} (in no pool)"
    if rc.mode == "mig":
        return f"{name} (static MIG: NVIDIA's device plugin serves it)"
    return f"{name} ({rc.mode})"


def _is_gpu_pool_node(s: ClusterSnapshot, name: str) -> bool:
    """A managed GPU node HAMi's plugin must stay off (static MIG, whole-gpu, another plugin's)."""
    node = s.node(name)
    return node is not None and s.released(node) is not None


def _placement_issues(s: ClusterSnapshot, p: Placement, what: str) -> Iterator[Issue]:
    ds = ObjectRef(kind="DaemonSet", name=p.name, namespace=p.namespace)
    if p.excluded:
        for node, problem in p.excluded:
            yield error(
                (ds, ObjectRef(kind="Node", name=node)),
                f"the {what} device plugin cannot run on {node}: {problem} (the DaemonSet's own "
                "placement; the operator does not override it)",
                fix="widen the DaemonSet's nodeSelector/affinity to admit the node (the operator "
                f"then pins it to {contract.LABEL_DEVICE_PLUGIN}={p.plugin}), or label the node "
                "through the policy's nodeLabels",
            )
        return
    if p.patch is not None:
        parts = []
        if p.unreached:
            parts.append(
                "not on "
                + "; ".join(f"{node} ({why})" for node, why in p.unreached[:10])
                + (f" and {len(p.unreached) - 10} more" if len(p.unreached) > 10 else "")
            )
        if p.extra:
            roles = [_node_role(s, n) for n in p.extra[:10]]
            more = f" and {len(p.extra) - 10} more" if len(p.extra) > 10 else ""
            parts.append("but on " + ", ".join(roles) + more)
        if not parts:
            parts.append(
                f"today by chance: it has no nodeSelector on {contract.LABEL_DEVICE_PLUGIN}, so "
                "a node joining a static-MIG or whole-gpu pool would get it"
            )
        severe = bool(p.unreached) or any(_is_gpu_pool_node(s, n) for n in p.extra)
        restarts = (
            "enforce mode applies it; it restarts the plugin pods, so it counts as a restart "
            "under restarts.minIntervalSeconds"
            if s.config.restarts.allowed
            else "the operator does not apply it while restarts.allowed is false"
        )
        adopted = p.adopted  # the hand-made placement is kept
        if adopted:
            restarts = (
                "the operator keeps the placement found while it is exact, rather than restart "
                "every plugin pod; it applies the patch once a node needs it, or apply it "
                "yourself at a moment of your choosing"
            )
        yield (error if severe else info if adopted else warning)(
            ds,
            f"the {what} device plugin does not run exactly on the {len(p.served)} node(s) "
            f"labelled {contract.LABEL_DEVICE_PLUGIN}={p.plugin}: " + "; ".join(parts),
            fix=f"kubectl -n {p.namespace} patch daemonset {p.name} --type=strategic -p "
            f"'{placement_patch_text(p)}' ({restarts})",
            fixable=s.config.restarts.allowed,
        )
    for node, why in p.still_unreached:
        yield error(
            (ds, ObjectRef(kind="Node", name=node)),
            f"the {what} device plugin cannot run on {node}: {why}, a taint no policy set",
            fix="remove the taint from the node, or add a toleration for it to the DaemonSet",
        )


@rule("plugin-placement", "the device plugin DaemonSets run exactly on the nodes that need them")
def check_placement(s: ClusterSnapshot) -> Iterator[Issue]:
    placed = {(p.namespace, p.name): p for p in placements(s)}
    targets = [
        (s.config.device_plugin, s.plugin, s.vgpu_nodes, "vGPU"),
        (s.config.ascend_device_plugin, s.ascend_plugin, s.plugin_nodes("ascend"), "Ascend"),
    ]
    for ref, view, nodes, what in targets:
        ds = ObjectRef(kind="DaemonSet", name=ref.name, namespace=ref.namespace)
        field = "devicePlugin" if what == "vGPU" else "ascendDevicePlugin"
        shown = [name_of(n) for n in nodes[:5]]
        if view is None:
            if nodes:
                yield error(
                    ds,
                    f"the {what} device plugin DaemonSet was not found, but {len(nodes)} node(s) "
                    f"need it ({', '.join(shown)})",
                    fix=f"deploy it, or set {field} in the operator config to where it is",
                )
            continue
        placement = placed.get((ref.namespace, ref.name))
        if placement is not None:
            yield from _placement_issues(s, placement, what)
            continue
        # Not kept by the operator (no managed node, or Ascend not enabled): whether the
        # DaemonSet reaches the nodes that need it.
        for node in nodes:
            node_ref = ObjectRef(kind="Node", name=name_of(node))
            problem = selector_problem(view, node)
            if problem:
                yield error(
                    (ds, node_ref),
                    f"the {what} device plugin cannot run on {name_of(node)}: {problem}",
                    fix="widen the DaemonSet's nodeSelector/affinity (or label the node through "
                    "the policy's nodeLabels)",
                )
            blocked = untolerated(view, node)
            if blocked:
                policy = _owned_taints(node)
                texts = [
                    taint_text(t) + (" (set by the policy)" if taint_text(t) in policy else "")
                    for t in blocked
                ]
                yield error(
                    (ds, node_ref),
                    f"the {what} device plugin does not tolerate {', '.join(texts)} on "
                    f"{name_of(node)}, so it never runs there",
                    fix="add a toleration for "
                    + ", ".join(str(t.get("key")) for t in blocked)
                    + " to the DaemonSet",
                )


@rule("plugin-node-config-mounted", "the node-config ConfigMap is mounted at /config")
def check_mount(s: ClusterSnapshot) -> Iterator[Issue]:
    view, c = s.plugin, s.plugin_container
    if view is None or c is None:
        return
    ref = s.config.node_config
    volumes = view.configmap_volumes()
    for mount in c.volume_mounts:
        if mount.get("mountPath", "").rstrip("/") == "/config":
            cm_name = volumes.get(str(mount.get("name")))
            if cm_name == ref.name:
                return
            found = f"/config holds ConfigMap {cm_name}" if cm_name else "/config is no ConfigMap"
            break
    else:
        found = "nothing is mounted at /config"
    yield error(
        _ds_ref(s),
        f"{found}: the plugin reads no /config/config.json, so every node runs hami-core and "
        "per-node split counts and filters are ignored (MIG nodes are not MIG to it)",
        fix=f"mount ConfigMap {ref.name} at /config in container {c.name} (Helm: "
        "nodeConfig.enabled=true)",
    )


@rule("nvidia-device-plugin-conflict", "no NVIDIA device plugin runs on a vGPU node")
def check_nvidia_plugin(s: ClusterSnapshot) -> Iterator[Issue]:
    match = s.config.nvidia_device_plugin
    vgpu = {name_of(n) for n in s.vgpu_nodes}
    for pod in s.pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in vgpu or pod_done(pod) or (s.plugin and s.plugin.selects(pod)):
            continue
        pod_labels = labels_of(pod)
        images = [c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or []]
        by_label = any(
            sel and all(pod_labels.get(k) == v for k, v in sel.items()) for sel in match.pod_labels
        )
        by_image = any(sub in img for img in images for sub in match.image_substrings)
        if by_label or by_image:
            yield error(
                (ObjectRef.of("Pod", pod), ObjectRef(kind="Node", name=str(node))),
                f"NVIDIA's device plugin pod {meta(pod).get('name')} runs on vGPU node {node}: "
                "two plugins advertise the same GPUs (after a restart nvidia.com/gpu reappears "
                "with the physical count, HAMi #829)",
                fix="set disableNvidiaDevicePlugin: true on the node's policy (GPU Operator), or "
                "exclude vgpu.volcano.sh/mode nodes from that DaemonSet",
            )


ASCEND_IMAGE_HINT = "ascend-device-plugin"


def _mounted_file(
    view: WorkloadView, container: ContainerView, cm_name: str, key: str
) -> str | None:
    """The path at which `key` of ConfigMap `cm_name` appears in the container, if mounted."""
    volumes = view.configmap_volumes()
    for mount in container.volume_mounts:
        if volumes.get(str(mount.get("name"))) != cm_name:
            continue
        path = str(mount.get("mountPath", ""))
        sub = mount.get("subPath")
        if sub == key:
            return path
        if not sub:
            return path.rstrip("/") + "/" + key
    return None


@rule("ascend-node-config-file", "the Ascend plugin reads the per-node config the operator renders")
def check_ascend_node_config_file(s: ClusterSnapshot) -> Iterator[Issue]:
    """The Ascend plugin reads `hami-device-node-config` only when started with
    `--node_config_file` (default "": Project-HAMi/ascend-device-plugin@v1.4.0:cmd/main.go); its
    shipped DaemonSet mounts the file but passes no such flag (ascend-device-plugin.yaml)."""
    nodes = s.plugin_nodes("ascend")
    view = s.ascend_plugin
    if not nodes or view is None:
        return
    ref = s.config.ascend_node_config
    ds = ObjectRef(kind="DaemonSet", name=view.name, namespace=view.namespace)
    c = view.container(s.config.ascend_device_plugin.container, ASCEND_IMAGE_HINT)
    if c is None:
        return
    path = _mounted_file(view, c, ref.name, ref.key)
    flag = c.flags.get("node_config_file")
    entries = f"the per-node entries of {len(nodes)} node(s) (vDeviceCount, hami-vnpu-core, "
    entries += "filterDevices)"
    if path is None:
        yield error(
            (ds, cm_ref(ref.namespace, ref.name)),
            f"ConfigMap {ref.name} is not mounted into container {c.name}: {entries} have no "
            "effect",
            fix=f"mount key {ref.key} of {ref.name} (e.g. at /{ref.key} with subPath {ref.key}) "
            f"and pass --node_config_file=/{ref.key}",
        )
    elif flag is None or not flag.value:
        yield error(
            (ds, cm_ref(ref.namespace, ref.name)),
            f"container {c.name} runs without --node_config_file: {ref.name} is mounted at "
            f"{path} but never read, so {entries} have no effect",
            fix=f"add --node_config_file={path} to the args of container {c.name}",
        )
    elif flag.value != path:
        yield error(
            (ds, cm_ref(ref.namespace, ref.name)),
            f"--node_config_file is {flag.value}, but {ref.name} is mounted at {path}: {entries} "
            "are not read",
            fix=f"pass --node_config_file={path}",
        )


@rule("plugin-node-overrides", "plugin ≤ v1.11: per-node split counts and core scaling agree")
def check_node_overrides(s: ClusterSnapshot) -> Iterator[Issue]:
    """Up to v1.11 the plugin registers every GPU with its flags' split count and core scaling:
    a policy's `hamiCore` values reach config.json but change nothing (`facts`)."""
    c = s.plugin_container
    if c is None or c.version is None or facts.plugin_reads_node_overrides(c.version):
        return
    flags = c.flags
    values = {}
    for flag in ("device-split-count", "device-cores-scaling"):
        given = flags.get(flag)
        try:
            values[flag] = float(given.value) if given and given.value else FLAG_DEFAULTS[flag]
        except ValueError:
            values[flag] = FLAG_DEFAULTS[flag]
    ignored: dict[str, tuple[set[str], list[str]]] = {}
    for node in s.vgpu_nodes:
        rc = s.released(node)
        hc = rc.hami_core if rc is not None else None
        if rc is None or hc is None:
            continue
        what: list[str] = []
        if hc.device_split_count and hc.device_split_count != values["device-split-count"]:
            what.append(
                f"deviceSplitCount {hc.device_split_count} (the plugin uses "
                f"--device-split-count={values['device-split-count']:g})"
            )
        if hc.device_core_scaling and hc.device_core_scaling != values["device-cores-scaling"]:
            what.append(
                f"deviceCoreScaling {hc.device_core_scaling:g} (the plugin uses "
                f"--device-cores-scaling={values['device-cores-scaling']:g})"
            )
        if hc.filter_devices and (hc.filter_devices.uuid or hc.filter_devices.index):
            what.append("filterDevices (every GPU is registered)")
        if what:
            nodes, texts = ignored.setdefault(rc.policy or "?", (set(), []))
            nodes.add(name_of(node))
            texts.extend(t for t in what if t not in texts)
    for policy, (nodes, texts) in sorted(ignored.items()):
        shown = sorted(nodes)
        yield warning(
            (_ds_ref(s), *(ObjectRef(kind="Node", name=n) for n in shown[:5])),
            f"plugin {c.version} ignores the per-node values of policy {policy} on "
            f"{len(shown)} node(s) ({', '.join(shown[:5])}): {'; '.join(texts)}; only plugin "
            "v1.12.0 and later read them from config.json",
            fix="upgrade the device plugin to v1.12.0 or later, or make the policy's hamiCore "
            "values equal to the flags (the operator sets the flags to deviceDefaults)",
        )
