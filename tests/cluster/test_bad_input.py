"""Bad input and faults on the real apiserver: a typo never taints the cluster, one bad
object never stalls the operator.

- generated specs: the models accept a spec if and only if the CRD accepts it;
- a policy name over 63 characters is refused naming metadata.name (the other admission cases
  are in tests/kit/invalid_specs.py, run by test_policy_validation.py);
- a node without GPU evidence is reported and never written, a forged ownership record makes the
  operator trust nothing of it, and the policy's other nodes converge;
- a forged inventory does not change knownMigGeometries; ConfigMaps with an integer of 4,301
  digits, a timestamp past year 9999 and a 368-byte alias bomb are findings naming the object
  and the key; with the bomb watched, node writes are not delayed by more than a second; and
  `doctor` completes on a cluster holding every one of these objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from kubernetes_asyncio import client

from tests.cluster.helpers import ClusterUnderTest, NodeFactory, PolicyFactory, eventually, unique
from tests.cluster.volcano_env import (
    DEVICE_CM,
    NODE_CM,
    PLUGIN_NS,
    SCHED_CM,
    SCHED_NS,
    VolcanoEnv,
    volcano_env,
)
from tests.cluster.volcano_ops import OperatorFactory, run_doctor, volcano_operator
from tests.kit import hostile, specgen
from vgpu_devcluster.install import OPERATOR_USER
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.snapshot import configmap_path
from vgpu_operator.core.nodes.validate import parse_policy
from vgpu_operator.kubeapi import NotFound, node_path, policy_path, request
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import OperatorConfig
from vgpu_operator.models.node import NodeConfig, Owned

__all__ = ["volcano_env", "volcano_operator"]

SAMPLES = 500


def body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


def generated(count: int) -> list[tuple[dict[str, Any], str]]:
    """`count` specs and names from the shared strategies, the same ones on every run."""
    out: list[tuple[dict[str, Any], str]] = []

    @settings(
        max_examples=count,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(raw=specgen.spec(), name=specgen.name)
    def collect(raw: dict[str, Any], name: str) -> None:
        out.append((raw, name))

    collect()
    return out[:count]


async def test_the_models_accept_a_spec_if_and_only_if_the_crd_does(
    api: client.ApiClient, installed: object
) -> None:
    cases = generated(SAMPLES)
    assert len(cases) == SAMPLES
    sem = asyncio.Semaphore(16)

    async def crd_accepts(raw: dict[str, Any], name: str) -> tuple[bool, str]:
        async with sem:
            try:
                await request(
                    api,
                    "POST",
                    policy_path(),
                    body=body(name, raw),  # dry run: nothing is stored, names may repeat
                    query={"dryRun": "All", "fieldValidation": "Strict"},
                    field_manager=None,
                )
                return True, ""
            except kubeapi.ApiError as exc:
                if exc.status not in (400, 422):
                    raise
                return False, str(exc)

    verdicts = await asyncio.gather(*(crd_accepts(r, n) for r, n in cases))
    disagree = []
    typeless = 0
    for (raw, name), (crd, why) in zip(cases, verdicts, strict=True):
        parsed = parse_policy({"metadata": {"name": name}, "spec": raw})
        models = parsed.policy is not None
        if crd and not models and specgen.typeless_gpus(raw):
            typeless += 1  # the one known difference (crdgen: a typeless union node)
            continue
        if crd != models:
            disagree.append((raw, name, why, [p.describe() for p in parsed.problems]))
    assert disagree == [], json.dumps(disagree[:5], indent=1)
    accepted = sum(1 for crd, _ in verdicts if crd)
    assert 100 <= accepted <= SAMPLES - 100, accepted  # both verdicts well represented
    assert typeless < SAMPLES // 20


async def test_a_policy_name_over_63_characters_is_refused_naming_the_field(
    api: client.ApiClient, installed: object
) -> None:
    spec = {"mode": "hami-core", "nodeSelector": {"matchLabels": {"pool": "x"}}}
    ok = "p" * 63
    await request(api, "POST", policy_path(), body=body(ok, spec), query={"dryRun": "All"})
    with pytest.raises(kubeapi.Invalid) as refused:
        await request(
            api, "POST", policy_path(), body=body("p" * 64, spec), query={"dryRun": "All"}
        )
    assert "metadata.name" in str(refused.value), refused.value
    assert "at most 63 characters" in str(refused.value)


def _written(local: Any, offset: int, node: str) -> list[dict[str, Any]]:
    return [
        e
        for e in local.audit_events(user=OPERATOR_USER, offset=offset)
        if e["objectRef"]["resource"] == "nodes" and e["objectRef"].get("name") == node
    ]


async def _labels(api: client.ApiClient, node: str) -> dict[str, str]:
    obj = await request(api, "GET", node_path(node))
    return dict(obj["metadata"].get("labels") or {})


async def test_no_write_without_gpu_evidence_or_with_a_forged_record(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    installed: Credentials,
    make_nodes: NodeFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    pool = unique("pool")
    on = {"test/pool": pool}
    forged_owned = Owned.model_validate(
        {
            "labels": {"kubernetes.io/hostname": "forged"},
            "replaced": {"kubernetes.io/os": "windows"},
        }
    ).to_annotation()
    [gpu] = await make_nodes("A100-SXM4-80GB", 1, labels=on, prefix="ok")
    [cpu] = await make_nodes(None, 1, labels=on, prefix="cpu")
    [forged_in] = await make_nodes(
        "A100-SXM4-80GB", 1, labels=on, annotations={contract.ANN_OWNED: forged_owned}, prefix="fi"
    )
    [forged_out] = await make_nodes(
        "A100-SXM4-80GB", 1, annotations={contract.ANN_OWNED: forged_owned}, prefix="fo"
    )
    offset = local.audit_offset()
    op = OperatorThread(installed, options=ReconcilerOptions(resync_seconds=3600)).start()
    try:
        name = await policies("ev", {"mode": "hami-core", "nodeSelector": {"matchLabels": on}})

        async def reported() -> bool:
            status = (await request(api, "GET", policy_path(name))).get("status") or {}
            problems = {(p["node"], p["reason"]) for p in status.get("problemNodes", [])}
            labelled = (await _labels(api, gpu)).get(contract.LABEL_POLICY) == name
            # A forged record freezes nothing: its system keys are dropped, never acted on.
            forged = (await _labels(api, forged_in)).get(contract.LABEL_POLICY) == name
            return labelled and forged and (cpu, "NoGpuEvidence") in problems

        await eventually(reported, timeout=30)
        await asyncio.sleep(1.0)  # a pass more: nothing else may come
        for node in (cpu, forged_out):
            assert _written(local, offset, node) == [], node
        for node in (forged_in, forged_out):
            labels = await _labels(api, node)
            assert labels["kubernetes.io/hostname"] == node  # never removed
            assert labels.get("kubernetes.io/os") != "windows"  # never "restored"
        forged_record = (await request(api, "GET", node_path(forged_in)))["metadata"][
            "annotations"
        ].get(contract.ANN_OWNED, "")
        assert "kubernetes.io" not in forged_record  # dropped from the record
        assert contract.LABEL_POLICY not in await _labels(api, cpu)
        status = (await request(api, "GET", policy_path(name)))["status"]
        message = next(p["message"] for p in status["problemNodes"] if p["node"] == cpu)
        assert "shows no NVIDIA GPU" in message and "requireGpuEvidence" in message
    finally:
        op.stop()

    # Turned off (clusters without GPU Feature Discovery): the CPU-only node is written too.
    off = OperatorThread(
        installed,
        options=ReconcilerOptions(resync_seconds=3600),
        config=OperatorConfig.model_validate({"requireGpuEvidence": False}),
    ).start()
    try:

        async def written() -> bool:
            return (await _labels(api, cpu)).get(contract.LABEL_POLICY) == name

        await eventually(written, timeout=30)
        assert (await _labels(api, forged_in))["kubernetes.io/hostname"] == forged_in
    finally:
        off.stop()


async def _finding_ids(op: OperatorThread) -> list[tuple[str, str]]:
    volcano = op.controller.volcano if op.controller is not None else None
    return [(f.id, f.message) for f in (volcano.findings or [])] if volcano is not None else []


async def test_bad_objects_are_findings_and_stall_nothing_and_doctor_completes(
    cluster: ClusterUnderTest,
    api: client.ApiClient,
    volcano_env: VolcanoEnv,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,
) -> None:
    local = cluster.require_audit()
    env = volcano_env
    await env.add_control_node()
    group = unique("mig")
    [mig] = await env.add_nodes(
        "H100-80GB-HBM3", 1, gpus=8, released=None, labels={"test/group": group}
    )
    # one forged inventory: 1g.10gb = 999,999 MiB for a model the catalog knows
    await env.patch(
        node_path(mig),
        {"metadata": {"annotations": {contract.ANN_INVENTORY: hostile.INVENTORY_TEXTS[0]}}},
    )
    await env.install()
    op = volcano_operator()
    await policies("mig", {"mode": "mig", "nodeSelector": {"matchLabels": {"test/group": group}}})

    async def geometry_rendered() -> bool:
        cm = await request(api, "GET", configmap_path(PLUGIN_NS, DEVICE_CM))
        return "H100 80GB HBM3" in cm["data"]["device-config.yaml"]

    await eventually(geometry_rendered, timeout=60)
    cm = await request(api, "GET", configmap_path(PLUGIN_NS, DEVICE_CM))
    text = cm["data"]["device-config.yaml"]
    # the catalog's 1g.10gb, at the lowest cited listing (9.62 GiB: core.volcano.mig_memory)
    assert "999999" not in text and "memory: 9845" in text

    async def warned() -> bool:
        return any(
            i == "mig-geometry-reports" and mig in m and "999999 MiB" in m
            for i, m in await _finding_ids(op)
        )

    await eventually(warned, timeout=30)

    # Write latency with a clean configuration: policy created -> node patched.
    async def write_latency(prefix: str) -> float:
        group = unique(prefix)
        [node] = await env.make_nodes("RTX-4090", 1, gpus=2, labels={"test/group": group})
        offset = local.audit_offset()
        name = await policies(
            prefix, {"mode": "hami-core", "nodeSelector": {"matchLabels": {"test/group": group}}}
        )

        async def patched() -> bool:
            return bool(_written(local, offset, node))

        await eventually(patched, timeout=30, interval=0.1)
        created = next(
            e
            for e in local.audit_events(offset=offset)
            if e["objectRef"]["resource"] == "vgpunodepolicies"
            and e["objectRef"].get("name") == name
            and e["verb"] == "create"
        )
        write = _written(local, offset, node)[0]
        return _seconds(write) - _seconds(created)

    clean = await write_latency("clean")

    # The bad objects: each a finding naming the ConfigMap and the key.
    await env.edit_configmap(SCHED_NS, SCHED_CM, lambda _: hostile.BOMB, "volcano-scheduler.conf")
    await env.edit_configmap(
        PLUGIN_NS,
        NODE_CM,
        lambda _: f'{{"nodeconfig": [{{"name": "x", "devicesplitcount": {hostile.BIG_INT}}}]}}',
        "config.json",
    )
    await env.patch(
        configmap_path(PLUGIN_NS, DEVICE_CM),
        {"metadata": {"annotations": {contract.ANN_DATA_CHANGED_AT: "9999-12-31T23:59:59.5Z"}}},
    )
    expected = [  # (the object and the key, the error), in one finding each
        (f"ConfigMap {SCHED_NS}/{SCHED_CM}, key volcano-scheduler.conf", "YAML aliases"),
        (f"ConfigMap {PLUGIN_NS}/{NODE_CM}, key config.json", "4301 digits"),
    ]

    seen: list[str] = []

    async def found() -> bool:
        seen[:] = [m for i, m in await _finding_ids(op) if i == "payload-readable"]
        return all(any(where in m and what in m for m in seen) for where, what in expected)

    try:
        await eventually(found, timeout=30)
    except AssertionError:
        raise AssertionError(f"findings: {seen}; all: {await _finding_ids(op)}") from None

    # With the bomb watched and passes running (each edit is one), node writes are not delayed.
    volcano = op.controller.volcano if op.controller is not None else None
    assert volcano is not None
    passes = volcano.passes

    async def nudge() -> None:
        for i in range(6):
            await env.edit_configmap(
                SCHED_NS, SCHED_CM, lambda t, i=i: t + f"# {i}\n", "volcano-scheduler.conf"
            )
            await asyncio.sleep(0.3)

    nudging = asyncio.create_task(nudge())
    bombed = await write_latency("bombed")
    await nudging
    assert volcano.passes > passes  # the configuration reconciler kept passing
    print(f"node write after policy creation: {clean:.3f} s clean, {bombed:.3f} s with the bomb")
    assert bombed <= clean + 1.0, (clean, bombed)

    # `doctor` completes on this cluster, naming every bad object.
    [forged] = await env.make_nodes(
        "A100-SXM4-80GB",
        1,
        annotations={contract.ANN_OWNED: hostile.OWNED_TEXTS[1]},
        prefix="forged",
    )
    code, out, err = await asyncio.wait_for(
        run_doctor(cluster.kubeconfig, "-o", "json"), timeout=120
    )
    assert code == 1, err  # findings, not "could not run"
    report = json.loads(out)
    text = json.dumps(report)
    messages = [f["message"] for f in report["findings"] if f["id"] == "payload-readable"]
    for where, what in expected:
        assert any(where in m and what in m for m in messages), (where, messages)
    assert "999999 MiB" in text and f"Node {forged}, annotation {contract.ANN_OWNED}" in text
    assert "the rule was stopped" not in text and "could not be evaluated" not in text
    with contextlib.suppress(NotFound):
        await request(api, "DELETE", node_path(forged))


def _seconds(event: dict[str, Any]) -> float:
    stamp = str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


ODD_SMI = """#!/bin/sh
# An nvidia-smi whose output the parser does not know (the review's case 15).
case "$*" in
  *--query-gpu*) echo "GPU 0, GPU-x, NVIDIA H100 80GB HBM3, 00000000:1A:00.0, 81559, Enabled, On" ;;
  *) echo "Unknown Error" ;;
esac
"""


async def test_odd_nvidia_smi_output_still_ends_with_a_state_on_the_node(
    api: client.ApiClient, kubeconfig: Path, make_nodes: NodeFactory, tmp_path: Any
) -> None:
    from vgpu_operator.agent.loop import Agent
    from vgpu_operator.agent.nodeapi import KubeNodeApi, agent_client
    from vgpu_operator.agent.smi import NvidiaSmi
    from vgpu_operator.kubeapi.lite import load
    from vgpu_operator.kubeapi.source import Source

    smi = tmp_path / "nvidia-smi"
    smi.write_text(ODD_SMI)
    smi.chmod(0o755)
    [node] = await make_nodes("H100-80GB-HBM3", 1, prefix="odd")
    released = NodeConfig.model_validate({"mode": "mig", "mig": {"partitioning": "dynamic"}})
    await request(
        api,
        "PATCH",
        node_path(node),
        body={"metadata": {"annotations": {contract.ANN_CONFIG: released.to_annotation()}}},
        content_type=kubeapi.MERGE_PATCH,
        field_manager=None,
    )
    async with agent_client(load(Source(kubeconfig=str(kubeconfig))), node) as lite:
        agent = Agent(KubeNodeApi(lite, node), NvidiaSmi(str(smi), timeout=10))
        outcome = await agent.act("start")
    assert outcome is not None and outcome.state == "failed", outcome
    labels = await _labels(api, node)
    assert labels[contract.LABEL_STATE] == "failed"
