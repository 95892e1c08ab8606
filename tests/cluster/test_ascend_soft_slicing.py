"""Ascend soft slicing (`hami-vnpu-core`) refused through the running controller, against the
demo's objects (Volcano v1.15.1, HAMi's volcano-vgpu-device-plugin v1.12.0) plus HAMi's Ascend
plugin v1.4.0 and `ascendVnpu.enabled: true`. HAMi's Ascend plugin schedules soft slicing with
Volcano 1.16 or later on arm64 only (Project-HAMi/ascend-device-plugin@v1.4.0:docs/volcano.md);
the scheduler's version is its image tag (`core.volcano.soft_slicing`), changed here as an
upgrade changes it:

- v1.15.1: an ascend-vnpu pool with `hamiVnpuCore: true` on two arm64 nodes is refused (status
  Stalled, a Warning Event, each naming the version and the fix) and the audit log shows no
  write to its nodes;
- v1.16.0-alpha.1 (a pre-release counts as 1.16): the same pool is accepted and its nodes are
  labelled;
- an amd64 node joining the pool: the policy is refused again, naming that node and its
  architecture; the amd64 node is never written, the arm64 nodes keep what they carry."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.cluster.ascendkit import CONFIG, set_version
from tests.cluster.auditkit import audit_offset, gone, node_writes, quiet, writes
from tests.cluster.helpers import ClusterUnderTest, NodeFactory, PolicyFactory, eventually, unique
from tests.cluster.poolkit import labels, node, wait_nodes
from tests.cluster.volcano_ops import OperatorFactory, volcano_operator
from vgpu_devcluster import upstream
from vgpu_operator import contract, kubeapi
from vgpu_operator.core.volcano.soft_slicing import SOFT_SLICING_REFUSED, SOFT_SLICING_SOURCE
from vgpu_operator.kubeapi.events import EVENTS_NAMESPACE

pytestmark = pytest.mark.cluster

__all__ = ["volcano_operator"]

ARCH = "kubernetes.io/arch"


async def stalled(api: client.ApiClient, policy: str) -> dict[str, Any]:
    """The policy's Stalled condition ({}: none yet)."""
    status = (await kubeapi.request(api, "GET", kubeapi.policy_path(policy))).get("status") or {}
    found = [c for c in status.get("conditions") or [] if c.get("type") == "Stalled"]
    return found[0] if found else {}


async def refusal_events(api: client.ApiClient, policy: str) -> list[str]:
    """The messages of the soft-slicing refusal's Warning Events on the policy."""
    selector = f"involvedObject.name={policy},reason={SOFT_SLICING_REFUSED},type=Warning"
    body = await kubeapi.request(
        api,
        "GET",
        f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events",
        query={"fieldSelector": selector},
    )
    return [str(e.get("message", "")) for e in body.get("items") or []]


async def refused_naming(api: client.ApiClient, policy: str, *words: str) -> str:
    """Until the policy is Stalled with the soft-slicing refusal's reason and a Warning Event
    says the same, both naming `words`; the Event's message."""
    seen: list[Any] = []

    async def check() -> bool:
        condition, events = await stalled(api, policy), await refusal_events(api, policy)
        seen[:] = [condition, events]
        told = [m for m in events if all(w in m for w in words)]
        return (
            condition.get("status") == "True"
            and condition.get("reason") == SOFT_SLICING_REFUSED
            and all(w in condition.get("message", "") for w in words)
            and bool(told)
        )

    try:
        await eventually(check, timeout=30, interval=0.3)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {seen}") from None
    message: str = next(m for m in seen[1] if all(w in m for w in words))
    assert SOFT_SLICING_SOURCE in message  # the upstream source, cited as repo@tag:path
    assert "shared" not in message and "/work" not in message, message
    return message


async def test_soft_slicing_refused_below_volcano_1_16_and_on_amd64_nodes(
    api: client.ApiClient,
    cluster: ClusterUnderTest,
    make_nodes: NodeFactory,
    volcano_operator: OperatorFactory,
    policies: PolicyFactory,  # after the operator: deleted while it runs (its finalizer)
) -> None:
    local = cluster.require_audit()
    installed = await upstream.install(api, hami="v1.12.0", ascend=True)
    try:
        pool = unique("soft")
        arm = await make_nodes(
            "Ascend910B3", 2, gpus=8, labels={"test/pool": pool, ARCH: "arm64"}, prefix="npu"
        )
        offset = audit_offset(local)
        volcano_operator(CONFIG)
        spec = {
            "mode": "ascend-vnpu",
            "nodeSelector": {"matchLabels": {"test/pool": pool}},
            "ascendVnpu": {"hamiVnpuCore": True},
        }
        name = await policies("soft", spec)

        # Volcano v1.15.1, as the manifest ships it: refused, no node written
        message = await refused_naming(api, name, "Volcano v1.15.1")
        assert "upgrade Volcano to v1.16.0 or later" in message, message
        assert "set spec.ascendVnpu.hamiVnpuCore: false" in message, message
        await eventually(quiet(local, offset), timeout=30, interval=1.0)
        assert not {n: c for n, c in node_writes(writes(local, offset)).items() if n in arm}
        for n in arm:
            assert contract.LABEL_POLICY not in labels(await node(api, n))

        # v1.16.0-alpha.1: accepted, the arm64 nodes labelled for the pool
        await set_version(api, "v1.16.0-alpha.1")

        def pooled(obj: dict[str, Any]) -> bool:
            lab = labels(obj)
            return lab.get(contract.LABEL_POLICY) == name and lab.get(contract.LABEL_MODE) == (
                "ascend-vnpu"
            )

        await wait_nodes(api, arm, pooled)
        await eventually(lambda: not_stalled(api, name), timeout=30, interval=0.3)
        assert set(node_writes(writes(local, offset))) >= set(arm)  # the log shows writes

        # an amd64 node joins the pool: refused, naming it; it is never written
        later = audit_offset(local)
        [amd] = await make_nodes("Ascend910B3", 1, gpus=8, labels={"test/pool": pool}, prefix="x86")
        message = await refused_naming(api, name, amd, f"{ARCH} amd64")
        assert f"narrow spec.nodeSelector to arm64 nodes ({ARCH}: arm64)" in message, message
        await eventually(quiet(local, later), timeout=30, interval=1.0)
        assert node_writes(writes(local, later)) == {}  # no node written, the amd64 one least
        assert contract.LABEL_POLICY not in labels(await node(api, amd))
        for n in arm:  # held as they are
            assert pooled(await node(api, n))
        # deleted while the operator runs, and gone: its finalizer released here, not by the
        # next test's operator
        await kubeapi.request(api, "DELETE", kubeapi.policy_path(name))
        await eventually(lambda: gone(api, name), timeout=30, interval=0.3)
    finally:
        await upstream.uninstall(api, installed)


async def not_stalled(api: client.ApiClient, policy: str) -> bool:
    return (await stalled(api, policy)).get("status") == "False"
