"""`vgpu-operator doctor --save-snapshot FILE` and `vgpu-operator plan --snapshot FILE`: a
snapshot comes back from its file equal (objects, policies, claim drivers, configuration, time);
the offline plan is the plan of the snapshot at the time it was read, in every output; `--config`
wins over the recorded configuration; `doctor` saves what `plan` reads online, so both plans are
the same (over a cluster served on the wire). The bad files of `--snapshot` and
`--save-snapshot` and their exit codes are in test_cli_errors.py's matrix; the ones here need a
snapshot to spoil."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.drakit import SELECTOR, kubelet_plugin_daemonset
from tests.kit.plan_world import ASCEND, CONFIG, LATER, NOTHING_TO_DO, a100_cluster
from tests.kit.snapshot_wire import kubeconfig, serve_cluster
from tests.kit.volcano_fixtures import gpu_node, pod
from tests.kit.wire import Wire, serve
from vgpu_devcluster import dra_driver
from vgpu_devcluster import fakesmi_state as fs
from vgpu_operator.commands import doctor, exitcodes, snapshot_file
from vgpu_operator.commands import plan as plan_cli
from vgpu_operator.commands.snapshot_file import ClusterRead, SnapshotFileError
from vgpu_operator.core.dra.observed import DraApi
from vgpu_operator.core.plan import plan
from vgpu_operator.core.rules import run_rules
from vgpu_operator.core.volcano.snapshot import ClusterSnapshot
from vgpu_operator.models.config import OperatorConfig, load_config
from vgpu_operator.models.node import NodeConfig

READ_AT = LATER + timedelta(microseconds=250)  # the file keeps the time to the microsecond
OTHER_CONFIG = "gpuMemoryFactor: 11\ndeviceDefaults: {deviceSplitCount: 4}\n"
GPU_CLAIM = {
    "metadata": {"name": "c", "namespace": "team-a", "resourceVersion": "3"},
    "status": {"allocation": {"devices": {"results": [{"driver": "gpu.nvidia.com"}]}}},
}


def mode_change(live: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(live)
    changed["spec"]["mode"] = "mig"
    changed["spec"]["mig"] = {"partitioning": "dynamic"}
    return changed


def write(directory: Path, name: str, text: str) -> str:
    path = directory / name
    path.write_text(text)
    return str(path)


def saved(directory: Path, s: ClusterSnapshot, policies: list[dict[str, Any]]) -> str:
    path = str(directory / "cluster.json")
    snapshot_file.save(path, ClusterRead(s, policies, READ_AT))
    return path


def run_plan(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = plan_cli.main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


# --- the file --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "claims"),
    [
        (CONFIG, None),
        (
            ASCEND,
            {"team-a/c": frozenset({"gpu.nvidia.com", "x.example.com"}), "team-a/d": frozenset()},
        ),
        (
            load_config(
                "mode: report\nonDelete: Retain\nrestarts: {allowed: false}\ngpuDraDrivers: []\n"
                "nvidiaDevicePluginConfig: {namespace: gpu-operator, name: time-slicing}\n"
            ),
            {},
        ),
    ],
    ids=["claims-not-read", "ascend-claims", "report-mode"],
)
def test_a_snapshot_comes_back_equal_from_its_file(
    tmp_path: Path, config: OperatorConfig, claims: dict[str, frozenset[str]] | None
) -> None:
    steady, live = a100_cluster()
    s = replace(steady, config=config, claims=claims)
    back = snapshot_file.load(saved(tmp_path, s, [live]))
    assert back.snapshot == s  # every list, the claims' drivers and the configuration
    assert (back.policies, back.read_at, back.notes) == ([live], READ_AT, ())
    data = json.loads((tmp_path / "cluster.json").read_text())
    assert (data["kind"], data["formatVersion"]) == ("VGPUClusterSnapshot", 1)
    # the configuration as the chart's `config:` holds it: what `run --config` reads, in effect
    # (an unset gpuMemoryFactor as the snapshot adopted it from the device config)
    assert load_config(yaml.safe_dump(data["config"])) == s.config
    assert s.config == config.model_copy(update={"gpu_memory_factor": s.config.memory_factor})


def test_the_dra_objects_come_back_and_the_rules_over_them_agree(tmp_path: Path) -> None:
    """With a `dra` section doctor reads what the DRA rules read (the versions served, the
    DeviceClasses, the driver's slices as its double publishes them,
    kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1): the file keeps them, and the rules over the
    saved snapshot find what they found online; a file without them (an older one) reads as
    not read."""
    dra = NodeConfig(mode="dra", policy="pool", generation=1)
    nodes = [gpu_node(n, "A100-SXM4-80GB", 2, released=dra, tainted=False) for n in ("d-0", "d-1")]
    for n in nodes:  # NVIDIA's device plugin is off there
        for part in ("capacity", "allocatable"):
            n["status"][part].pop("nvidia.com/gpu", None)
    state = fs.init_state(tmp_path / "d-0.json", "A100-SXM4-80GB", 2, node="d-0")
    plugin = pod("dra-driver-nvidia-gpu", "kubelet-plugin-d-0", node="d-0", labels=dict(SELECTOR))
    plugin["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    classes = dra_driver.device_classes()
    s = ClusterSnapshot(
        config=load_config("dra: {}\n"),
        daemonsets=[kubelet_plugin_daemonset()],
        nodes=nodes,
        pods=[plugin],
        dra_api=DraApi(
            served=("resource.k8s.io/v1",),
            device_classes=tuple(c for c in classes if c["metadata"]["name"] != "mig.nvidia.com"),
            resource_slices=tuple(dra_driver.resource_slices("d-0", state, node_uid="u")),
        ),
    )
    back = snapshot_file.load(saved(tmp_path, s, []))
    assert back.snapshot.dra_api == s.dra_api
    online, offline = run_rules(s), run_rules(back.snapshot)
    assert offline.findings == online.findings
    named = {(f.id, str(o)) for f in online.findings if f.id.startswith("dra-") for o in f.objects}
    # d-0 is served; d-1 has neither the plugin nor a slice, and mig.nvidia.com is missing
    assert {
        ("dra-deviceclass", "DeviceClass mig.nvidia.com"),
        ("dra-node-slices", "Node d-1"),
        ("dra-plugin-placement", "Node d-1"),
    } <= named
    assert ("dra-second-owner", "Node d-0") not in named
    assert not [(rule, o) for rule, o in named if o == "Node d-0"]
    # an older file, without the key: the DRA rules see nothing read and say nothing
    data = json.loads((tmp_path / "cluster.json").read_text())
    del data["dra"]
    older = snapshot_file.from_data(data, "older.json")
    assert older.snapshot.dra_api is None
    assert not [f for f in run_rules(older.snapshot).findings if f.id.startswith("dra-")]


def test_a_snapshot_holds_no_secret(tmp_path: Path) -> None:
    steady, live = a100_cluster()
    data = json.loads(Path(saved(tmp_path, steady, [live])).read_text())
    lists = ("policies", "configMaps", "deployments", "daemonSets", "nodes", "pods")
    assert set(data) == {
        "kind",
        "formatVersion",
        "readAt",
        "writtenBy",
        "config",
        *lists,
        "resourceClaimDrivers",
        "dra",  # null here: the configuration has no `dra` section
    }
    assert data["dra"] is None
    assert (tmp_path / "cluster.json").stat().st_mode & 0o777 == 0o600
    kinds = {obj.get("kind") for key in lists for obj in data[key]}
    assert "Secret" not in kinds and kinds <= {
        "ConfigMap",
        "Deployment",
        "DaemonSet",
        "Node",
        "Pod",
        "VGPUNodePolicy",
        None,
    }


def test_a_failed_save_leaves_nothing_behind(tmp_path: Path) -> None:
    steady, live = a100_cluster()
    (tmp_path / "taken").mkdir()
    with pytest.raises(SnapshotFileError) as caught:
        doctor.save_snapshot(str(tmp_path / "taken"), ClusterRead(steady, [live], READ_AT))
    assert caught.value.code == exitcodes.CANNOT
    assert f"cannot write snapshot {tmp_path / 'taken'}" in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize(
    ("spoil", "says"),
    [
        (lambda d: d.update(config={"onDelete": "Delet"}), "not valid for this version"),
        (lambda d: d.update(config={"deviceConfig": "auto"}), "names to resolve from the cluster"),
        (lambda d: d.update(nodes={"a": 1}), "`nodes` is not a list"),
        (lambda d: d["pods"].append("x"), "pods[5] is not a Kubernetes object"),
        (lambda d: d.pop("policies"), "`policies` is not a list"),
        (lambda d: d.update(resourceClaimDrivers=["x"]), "not a map of driver lists"),
        (lambda d: d.update(readAt="yesterday"), "readAt 'yesterday' is not a time"),
        (lambda d: d.update(formatVersion="1"), "formatVersion '1' is not a version"),
    ],
    ids=["config", "auto", "nodes", "pod", "policies", "claims", "read-at", "version"],
)
def test_a_spoilt_snapshot_is_named_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spoil: Any, says: str
) -> None:
    steady, live = a100_cluster()
    path = Path(saved(tmp_path, steady, [live]))
    data = json.loads(path.read_text())
    spoil(data)
    path.write_text(json.dumps(data))
    code, out, err = run_plan(["--snapshot", str(path), "a100-pool"], capsys)
    assert code == exitcodes.USAGE and out == ""
    assert str(path) in err and says in err, err
    assert "--config FILE" in err or "doctor --save-snapshot FILE" in err, err


# --- the offline plan ------------------------------------------------------------------------


def test_the_offline_plan_is_the_plan_of_the_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady, live = a100_cluster()
    path = saved(tmp_path, steady, [live])
    changed = mode_change(live)
    policy_file = write(tmp_path, "policy.yaml", yaml.safe_dump(changed))
    policies, names = plan_cli.planned_policies([live], None, [changed])
    expected = plan(steady, policies, READ_AT)  # at the time the snapshot was read
    assert expected.changes and expected.restarts  # a plan with due times and bodies

    code, out, _ = run_plan(["--snapshot", path, "-f", policy_file, "-o", "json"], capsys)
    assert code == exitcodes.FINDINGS
    assert out == json.dumps(plan_cli.to_json(expected, names), indent=2) + "\n"
    code, out, _ = run_plan(["--snapshot", path, "-f", policy_file, "-o", "yaml"], capsys)
    assert yaml.safe_load(out) == json.loads(json.dumps(plan_cli.to_json(expected, names)))
    code, out, _ = run_plan(["--snapshot", path, "-f", policy_file], capsys)
    assert out == plan_cli.format_text(expected, names)

    # the live policy as it is: nothing would change, exit 0
    code, out, _ = run_plan(["--snapshot", path, "a100-pool"], capsys)
    assert (code, out) == (exitcodes.OK, NOTHING_TO_DO)
    code, _, err = run_plan(["--snapshot", path, "absent"], capsys)
    assert code == exitcodes.USAGE and "no VGPUNodePolicy 'absent' in the cluster" in err


def test_config_wins_over_the_recorded_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady, live = a100_cluster()
    path = saved(tmp_path, steady, [live])  # read with CONFIG: converged, nothing to do
    other = write(tmp_path, "config.yaml", OTHER_CONFIG)
    code, out, err = run_plan(["--snapshot", path, "a100-pool", "-o", "json"], capsys)
    assert code == exitcodes.OK and err == ""
    code, out, err = run_plan(
        ["--snapshot", path, "a100-pool", "--config", other, "-o", "json"], capsys
    )
    policies, names = plan_cli.planned_policies([live], "a100-pool", [])
    expected = plan(replace(steady, config=load_config(OTHER_CONFIG)), policies, READ_AT)
    assert code == exitcodes.FINDINGS and err == ""  # it reads the objects the snapshot has
    assert json.loads(out) == json.loads(json.dumps(plan_cli.to_json(expected, names)))
    assert "volcano-vgpu-device-config" in [c["name"] for c in json.loads(out)["configMaps"]]


def test_config_makes_a_snapshot_of_an_older_configuration_usable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady, live = a100_cluster()
    path = Path(saved(tmp_path, steady, [live]))
    data = json.loads(path.read_text())
    data["config"]["removedSetting"] = True  # a key this version no longer knows
    path.write_text(json.dumps(data))
    code, _, err = run_plan(["--snapshot", str(path), "a100-pool"], capsys)
    assert code == exitcodes.USAGE and "give the configuration with --config FILE" in err
    config = write(tmp_path, "config.yaml", "gpuMemoryFactor: 11\n")
    code, out, err = run_plan(["--snapshot", str(path), "a100-pool", "--config", config], capsys)
    assert (code, out) == (exitcodes.OK, NOTHING_TO_DO)
    assert "which objects it read is not known" in err


def test_a_config_naming_objects_the_snapshot_did_not_read_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady, live = a100_cluster()
    path = saved(tmp_path, steady, [live])
    elsewhere = write(
        tmp_path, "config.yaml", "nodeConfig: {namespace: gpu, name: node-config, key: c.json}\n"
    )
    code, _, err = run_plan(["--snapshot", path, "a100-pool", "--config", elsewhere], capsys)
    assert code == exitcodes.FINDINGS, err  # the node config is absent: it would be created
    assert (
        "note: --config names objects the snapshot did not read (ConfigMap gpu/node-config)" in err
    )
    assert "doctor --config FILE --save-snapshot FILE" in err


def test_a_config_with_auto_cannot_be_resolved_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady, live = a100_cluster()
    path = saved(tmp_path, steady, [live])
    auto = write(tmp_path, "config.yaml", "devicePlugin: auto\n")
    code, out, err = run_plan(["--snapshot", path, "a100-pool", "--config", auto], capsys)
    assert code == exitcodes.USAGE and out == ""
    assert f"{auto} has names to resolve from the cluster (devicePlugin.namespace" in err
    assert "leave out --config" in err


# --- doctor saves what plan reads ------------------------------------------------------------


@pytest.fixture
async def wire() -> Any:
    async for w in serve():
        yield w


async def test_doctor_saves_what_the_online_plan_reads(
    wire: Wire, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady, live = a100_cluster()
    serve_cluster(wire, steady, policies=[live], claims=[GPU_CLAIM])
    kc = kubeconfig(wire, tmp_path)
    path = str(tmp_path / "cluster.json")
    await doctor.check(kc, None, CONFIG, ["scheduler-vgpu-enabled"], path)
    assert f"saved the snapshot to {path} (3 nodes, 5 pods, 1 policies)" in capsys.readouterr().err
    read = snapshot_file.load(path)
    assert read.snapshot.claims == {"team-a/c": frozenset({"gpu.nvidia.com"})}
    assert read.policies == [live] and read.snapshot.config == CONFIG
    assert not [r.path for r in wire.requests if "secret" in r.path]

    changed = mode_change(live)
    online, names = await plan_cli.compute(kc, None, CONFIG, None, [changed], now=read.read_at)
    assert online.changes
    policy_file = write(tmp_path, "policy.yaml", yaml.safe_dump(changed))
    code, out, _ = run_plan(["--snapshot", path, "-f", policy_file, "-o", "json"], capsys)
    assert code == exitcodes.FINDINGS
    assert out == json.dumps(plan_cli.to_json(online, names), indent=2) + "\n"


async def test_a_cluster_without_the_policy_crd_is_saved_with_no_policy(
    wire: Wire, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steady, _ = a100_cluster()
    serve_cluster(wire, steady)  # no VGPUNodePolicy CRD, no resource.k8s.io/v1
    path = str(tmp_path / "cluster.json")
    await doctor.check(kubeconfig(wire, tmp_path), None, CONFIG, ["scheduler-vgpu-enabled"], path)
    assert "note: the cluster has no VGPUNodePolicy CRD" in capsys.readouterr().err
    read = snapshot_file.load(path)
    assert read.policies == [] and read.snapshot.claims is None
