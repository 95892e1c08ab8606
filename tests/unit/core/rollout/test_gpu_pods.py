"""Which pods the pod index keeps, and what it keeps of them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vgpu_operator.core.rollout.gpu_pods import (
    compact_pod,
    gpu_pod,
    gpu_resources,
    holds_gpu,
    interned,
    label_selector,
    nvidia_plugin_workload,
    plugin_config_names,
    plugin_names_in,
    pod_key,
    snapshot_gpu_resources,
    snapshot_pod,
)
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import NvidiaDevicePluginMatch, OperatorConfig, load_config
from vgpu_operator.models.volcano_views import workload_view

DEFAULTS = gpu_resources(OperatorConfig())


def pod(
    limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    init: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": resources}]}
    if init is not None:
        spec["initContainers"] = [{"name": "setup", "resources": {"limits": init}}]
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    "resource",
    [
        "volcano.sh/vgpu-number",
        "volcano.sh/vgpu-memory",
        "volcano.sh/vgpu-memory-percentage",
        "volcano.sh/vgpu-cores",
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "huawei.com/Ascend910B3",
        "huawei.com/Ascend310P-memory",
        "volcano.sh/gpu-memory",
        "volcano.sh/gpu-number",
    ],
)
def test_every_gpu_resource_family_is_kept(resource: str) -> None:
    assert holds_gpu(pod({resource: "1"}), DEFAULTS)
    assert holds_gpu(pod(requests={resource: "2"}), DEFAULTS)


@pytest.mark.parametrize(
    "limits",
    [
        {},
        {"cpu": "2", "memory": "4Gi"},
        {"nvidia.com/gpu": "0"},
        {"example.com/fpga": "1"},
        {"huawei.com/npu": "1"},
    ],
)
def test_pods_without_gpu_resources_are_not_kept(limits: dict[str, str]) -> None:
    assert not holds_gpu(pod(limits), DEFAULTS)
    assert gpu_pod(DEFAULTS)(pod(limits)) is None


def test_an_init_container_with_a_gpu_counts() -> None:
    assert holds_gpu(pod({"cpu": "1"}, init={"nvidia.com/gpu": "1"}), DEFAULTS)


def test_configured_vgpu_names_are_kept_besides_volcanos_own() -> None:
    cfg = load_config("resourceNames: {count: example.com/vgpu-count, memory: example.com/mem}")
    names = gpu_resources(cfg)
    assert holds_gpu(pod({"example.com/vgpu-count": "1"}), names)
    assert holds_gpu(pod({"example.com/mem": "100"}), names)
    assert holds_gpu(pod({"volcano.sh/vgpu-number": "1"}), names)  # Volcano >= 1.14.3's
    assert not holds_gpu(pod({"example.com/mem": "100"}), DEFAULTS)  # configured: not a default
    # a name that says gpu is one, configured or not (a device plugin's renamed resource)
    assert holds_gpu(pod({"example.com/vgpu-count": "1"}), DEFAULTS)


def test_a_kept_pod_is_compacted_to_what_is_read() -> None:
    raw = pod({"nvidia.com/gpu": "1"})
    raw["metadata"].update(
        uid="u1",
        resourceVersion="7",
        labels={"app": "train"},
        annotations={"volcano.sh/vgpu-mode": "mig"},
        managedFields=[{"manager": "kubectl"}],
        ownerReferences=[{"kind": "Job", "name": "j"}],
    )
    raw["spec"].update(nodeName="n1", schedulerName="volcano", volumes=[{"name": "v"}])
    raw["spec"]["containers"][0].update(image="img", env=[{"name": "A", "value": "1"}])
    raw["status"] = {
        "phase": "Running",
        "startTime": "t",
        "conditions": [
            {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "t"},
        ],
    }
    kept = gpu_pod(DEFAULTS)(raw)
    assert kept == compact_pod(raw)
    assert kept == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"app": "train"},
            "annotations": {"volcano.sh/vgpu-mode": "mig"},
            "ownerReferences": [{"kind": "Job", "name": "j"}],
        },
        "spec": {
            "nodeName": "n1",
            "schedulerName": "volcano",
            "containers": [
                {"name": "main", "image": "img", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ],
            "initContainers": [],
        },
        # the Ready condition alone: whether a plugin pod serves (core.dra.prerequisites)
        "status": {
            "phase": "Running",
            "startTime": "t",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    assert compact_pod(kept) == kept  # a listing reduced page by page parses the same
    assert pod_key(kept) == "ns/p"


def test_a_workloads_pods_are_listed_by_its_match_labels() -> None:
    assert label_selector({"name": "volcano-device-plugin"}) == "name=volcano-device-plugin"
    assert label_selector({"b": "2", "a": "1"}) == "a=1,b=2"


def daemonset(labels: dict[str, str], image: str) -> dict[str, Any]:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "d", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }


def test_nvidia_device_plugin_daemonsets_are_recognised_by_labels_or_image() -> None:
    match = NvidiaDevicePluginMatch()
    by_label = daemonset({"app": "nvidia-device-plugin-daemonset"}, "registry/other:1")
    by_image = daemonset({"x": "y"}, "nvcr.io/nvidia/k8s-device-plugin:v0.17.0")
    other = daemonset({"app": "kube-proxy"}, "registry.k8s.io/kube-proxy:v1.35.4")
    assert nvidia_plugin_workload(workload_view(by_label), match)
    assert nvidia_plugin_workload(workload_view(by_image), match)
    assert not nvidia_plugin_workload(workload_view(other), match)


def test_kept_pods_share_their_strings() -> None:
    parse = gpu_pod(DEFAULTS)
    # decoded separately, as two watch events are: equal strings, distinct objects
    a = json.loads(json.dumps(pod({"nvidia.com/gpu": "1"})))
    b = json.loads(json.dumps(pod({"nvidia.com/gpu": "1"})))
    key_a = next(iter(a["spec"]["containers"][0]["resources"]["limits"]))
    key_b = next(iter(b["spec"]["containers"][0]["resources"]["limits"]))
    assert key_a == key_b and key_a is not key_b
    kept_a, kept_b = parse(a), parse(b)
    assert kept_a == compact_pod(a) and kept_b == compact_pod(b)
    [ka] = kept_a["spec"]["containers"][0]["resources"]["limits"]  # type: ignore[index]
    [kb] = kept_b["spec"]["containers"][0]["resources"]["limits"]  # type: ignore[index]
    assert ka is kb
    assert interned({"a": ["x", 1, None]}) == {"a": ["x", 1, None]}


def test_replicas_share_their_containers_labels_and_owner() -> None:
    """A Deployment's replicas repeat their containers, labels and owner: the index keeps each
    once (SHARED_PARTS), and a pod whose part differs keeps its own."""
    parse = gpu_pod(DEFAULTS)

    def replica(name: str, image: str) -> dict[str, Any]:
        body = pod({"nvidia.com/gpu": "1"})
        body["metadata"] = {
            "name": name,
            "namespace": "team",
            "labels": {"app": "train", "pod-template-hash": "5d8f7c9b4"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "train-5d8f7c9b4", "uid": "u"}],
        }
        body["spec"]["containers"][0]["image"] = image
        body["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        return json.loads(json.dumps(body))  # decoded apart, as two watch events are

    a, b = parse(replica("a", "train:1")), parse(replica("b", "train:1"))
    other = parse(replica("c", "train:2"))
    assert a is not None and b is not None and other is not None
    for path in (("metadata", "labels"), ("metadata", "ownerReferences"), ("spec", "containers")):
        assert a[path[0]][path[1]] is b[path[0]][path[1]], path
    assert a["status"]["conditions"] is b["status"]["conditions"]
    assert other["spec"]["containers"] is not a["spec"]["containers"]
    assert other["spec"]["containers"][0]["image"] == "train:2"
    assert other["metadata"]["labels"] is a["metadata"]["labels"]
    assert a == compact_pod(replica("a", "train:1"))  # what is kept is unchanged


# The GPU Operator's time-slicing ConfigMap, one config per key (the plugin's README example at
# NVIDIA/k8s-device-plugin@v0.17.0:README.md, "With CUDA Time-Slicing", renameByDefault).
SHARED_CONFIG = """\
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 10
"""


def plugin_configmap(**data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"namespace": "gpu-operator", "name": "time-slicing-config"},
        "data": data,
    }


def test_the_names_nvidias_plugin_config_renames_to_are_gpu_resources() -> None:
    config = load_config(
        "nvidiaDevicePluginConfig: {namespace: gpu-operator, name: time-slicing-config}"
    )
    s = ClusterSnapshot(config=config, configmaps=[plugin_configmap(any=SHARED_CONFIG)])
    resources = snapshot_gpu_resources(s)
    assert {"nvidia.com/gpu", "nvidia.com/gpu.shared"} <= resources.names
    assert plugin_config_names(s).names == {"nvidia.com/gpu", "nvidia.com/gpu.shared"}
    assert holds_gpu(pod(limits={"nvidia.com/gpu.shared": "1"}), resources)
    # none named, or not there: only the built-in names (nvidia.com/ counts all the same)
    assert snapshot_gpu_resources(ClusterSnapshot()) == DEFAULTS
    missing = ClusterSnapshot(config=config)
    assert plugin_config_names(missing).problems == ("the ConfigMap is not there",)
    assert snapshot_gpu_resources(missing).names == DEFAULTS.names


def test_names_widen_only_when_they_match_what_the_old_did_not() -> None:
    assert not DEFAULTS.widens(DEFAULTS.with_names(["nvidia.com/gpu.shared"]))  # the domain
    wider = DEFAULTS.with_names(["acme.com/accel"])
    assert DEFAULTS.widens(wider) and not wider.widens(DEFAULTS)
    assert wider.match("acme.com/accel") and not DEFAULTS.match("acme.com/accel")
    assert wider.drivers == DEFAULTS.drivers == {"gpu.nvidia.com"}


def test_the_configured_dra_drivers_decide_which_claims_count() -> None:
    resources = gpu_resources(load_config("gpuDraDrivers: [gpu.example.com]"))
    raw = pod(limits={"cpu": "1"})
    raw["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    raw["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}
    kept = compact_pod(raw)  # the index keeps what the decision reads
    assert kept["status"]["resourceClaimStatuses"] == raw["status"]["resourceClaimStatuses"]
    nvidia = {"ns/p-gpu": frozenset({"gpu.nvidia.com"})}
    assert holds_gpu(kept, DEFAULTS, nvidia) and not holds_gpu(kept, resources, nvidia)
    assert holds_gpu(kept, resources, {"ns/p-gpu": frozenset({"gpu.example.com"})})
    assert holds_gpu(kept, resources)  # the index keeps it: no claims at hand


def test_a_snapshot_keeps_the_pods_the_rules_read_and_drops_the_rest() -> None:
    config = OperatorConfig()
    keep = snapshot_pod(config, DEFAULTS)
    plain = pod({"cpu": "1"})
    assert keep(plain) is None  # a CPU pod: no rule reads it
    assert keep(pod({"nvidia.com/mig-1g.10gb": "1"})) == compact_pod(
        pod({"nvidia.com/mig-1g.10gb": "1"})
    )
    claim = {**plain, "spec": {**plain["spec"], "resourceClaims": [{"name": "gpu"}]}}
    assert keep(claim) is not None  # any claim: which driver allocated it is decided later
    owned = {"name": "p", "namespace": "ns", "ownerReferences": [{"kind": "DaemonSet"}]}
    assert keep({**plain, "metadata": owned}) is not None  # a plugin is known by its DaemonSet
    scheduler = {"name": "s", "namespace": config.scheduler.deployment.namespace}
    assert keep({**plain, "metadata": scheduler}) is not None  # the scheduler's pods
    plugin = {"name": "d", "namespace": config.device_plugin.namespace}
    assert keep({**plain, "metadata": plugin}) is not None  # the configured plugin's namespace
    labelled = {"name": "n", "namespace": "ns", "labels": {"app": "nvidia-device-plugin-daemonset"}}
    assert keep({**plain, "metadata": labelled}) is not None  # NVIDIA's plugin by its labels
    image = {"containers": [{"name": "p", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}
    assert keep({**plain, "spec": image}) is not None  # or its image, wherever it runs


def test_a_snapshots_gpu_names_are_those_of_the_configmaps_as_read() -> None:
    config = load_config(
        "nvidiaDevicePluginConfig: {namespace: gpu-operator, name: time-slicing-config}"
    )
    configmaps = [plugin_configmap(any=SHARED_CONFIG)]
    s = ClusterSnapshot(config=config, configmaps=configmaps)
    assert plugin_names_in(config, configmaps) == plugin_config_names(s)
    assert plugin_names_in(config, []).problems == ("the ConfigMap is not there",)
    renamed = pod({"acme.com/accel": "1"})
    resources = gpu_resources(config, ["acme.com/accel"])
    assert snapshot_pod(config, resources)(renamed) is not None
    assert snapshot_pod(config, DEFAULTS)(renamed) is None
