"""Rules on the device plugin DaemonSets as deployed: whether they run exactly on the nodes that
need them (placement on managed nodes), whether they mount the per-node configuration the
operator renders (HAMi's node-config at /config, the Ascend plugin's node config file), and
whether NVIDIA's own device plugin competes with them on a vGPU node."""

from __future__ import annotations

from collections.abc import Iterator

from vgpu_operator import contract
from vgpu_operator.core.rules.base import Issue, ObjectRef, cm_ref, error, info, rule, warning
from vgpu_operator.core.rules.plugin import plugin_ref
from vgpu_operator.core.volcano.placement import (
    GPU_CLIENT_LABEL,
    GPU_CLIENT_VALUE,
    Placement,
    placement_patch_text,
    placements,
    selector_problem,
    taint_text,
    untolerated,
)
from vgpu_operator.core.volcano.plugin_identity import (
    FOREIGN_PLUGIN_FIX,
    foreign_images,
    foreign_vgpu_plugin,
)
from vgpu_operator.core.volcano.snapshot import (
    ClusterSnapshot,
    Obj,
    annotations_of,
    labels_of,
    meta,
    name_of,
    pod_done,
)
from vgpu_operator.core.volcano.workloads import ASCEND_IMAGE_HINT
from vgpu_operator.models.config_refs import WorkloadRef
from vgpu_operator.models.node import Owned
from vgpu_operator.models.volcano_views import ContainerView, WorkloadView


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


def gpu_client_text(p: Placement) -> str:
    """What the GPU Operator's client selector of the placement changes, and why."""
    if p.gpu_client == "added":
        return (
            f"it has no nodeSelector {GPU_CLIENT_LABEL}={GPU_CLIENT_VALUE}, which every node it "
            "serves carries: the GPU Operator's mig-manager stops, before a MIG change, only the "
            "DaemonSet pods whose nodeSelector has that key (NVIDIA/mig-parted@v0.15.0:"
            "pkg/mig/reconfigure/reconfigure.go), so it changes MIG under a running plugin"
        )
    return (
        f"its nodeSelector {GPU_CLIENT_LABEL} (the operator's) would keep it off a node it serves "
        "that lacks the label"
    )


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
        selector = p.patch["spec"]["template"]["spec"].get("nodeSelector") or {}
        if not parts and contract.LABEL_DEVICE_PLUGIN in selector:
            parts.append(
                f"today by chance: it has no nodeSelector on {contract.LABEL_DEVICE_PLUGIN}, so "
                "a node joining a static-MIG or whole-gpu pool would get it"
            )
        if p.gpu_client is not None:  # the GPU Operator's client selector (core.volcano.placement)
            parts.append(gpu_client_text(p))
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
            f"labelled {contract.LABEL_DEVICE_PLUGIN}={p.plugin}: " + "; ".join(parts)
            if p.unreached or p.extra or contract.LABEL_DEVICE_PLUGIN in selector
            else f"the {what} device plugin runs on the {len(p.served)} node(s) labelled "
            f"{contract.LABEL_DEVICE_PLUGIN}={p.plugin}, but " + "; ".join(parts),
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


@rule("plugin-not-hami", "the DaemonSet configured as devicePlugin runs HAMi's vGPU plugin")
def check_plugin_identity(s: ClusterSnapshot) -> Iterator[Issue]:
    """Another plugin under that name (volcano-sh/devices' legacy plugin, NVIDIA's) reads none
    of what the operator renders: the operator patches neither its args nor its placement, nor
    restarts it (`plugin_identity`)."""
    view = s.plugin
    if view is None or foreign_vgpu_plugin(s) is None:
        return
    ref = s.config.device_plugin
    yield error(
        plugin_ref(s),
        f"DaemonSet {ref.namespace}/{ref.name}, the operator config's devicePlugin, does not run "
        f"HAMi's vGPU device plugin (images: {', '.join(foreign_images(view)) or 'none'}): the "
        "operator leaves it alone (no args, placement or restart), and no vGPU node gets "
        "HAMi's plugin from it",
        fix=FOREIGN_PLUGIN_FIX,
    )


@rule("plugin-placement", "the device plugin DaemonSets run exactly on the nodes that need them")
def check_placement(s: ClusterSnapshot) -> Iterator[Issue]:
    placed = {(p.namespace, p.name): p for p in placements(s)}
    foreign = foreign_vgpu_plugin(s) is not None  # reported by plugin-not-hami
    targets = [
        (
            s.config.device_plugin,
            None if foreign else s.plugin,
            [] if foreign else s.vgpu_nodes,
            "vGPU",
        ),
        (s.config.ascend_device_plugin, s.ascend_plugin, s.plugin_nodes("ascend"), "Ascend"),
    ]
    if s.config.dra is not None:  # the DRA driver's kubelet plugin, placed the same way
        dra = s.config.dra.kubelet_plugin_daemon_set
        ref = WorkloadRef(namespace=dra.namespace, name=dra.name)
        targets.append((ref, s.dra_plugin, s.plugin_nodes("dra"), "DRA kubelet"))
    fields = {"vGPU": "devicePlugin", "Ascend": "ascendDevicePlugin"}
    for ref, view, nodes, what in targets:
        ds = ObjectRef(kind="DaemonSet", name=ref.name, namespace=ref.namespace)
        field = fields.get(what, "dra.kubeletPluginDaemonSet")
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
        plugin_ref(s),
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
        images = [c.get("image", "") for c in (pod.get("spec") or {}).get("containers") or []]
        if match.recognises(labels_of(pod), images):
            yield error(
                (ObjectRef.of("Pod", pod), ObjectRef(kind="Node", name=str(node))),
                f"NVIDIA's device plugin pod {meta(pod).get('name')} runs on vGPU node {node}: "
                "two plugins advertise the same GPUs (after a restart nvidia.com/gpu reappears "
                "with the physical count, HAMi #829)",
                fix="set disableNvidiaDevicePlugin: true on the node's policy (GPU Operator), or "
                "exclude vgpu.volcano.sh/mode nodes from that DaemonSet",
            )


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
