"""What `vgpu-operator plan -o json` says the operator would write, beside what it wrote: the
plan's "writes" and the operator's writes read back from the audit log (bodies logged at level
Request for its identity: `LocalCluster.request_audited_kubeconfig`), in one shape, compared
write for write with the write-time stamps masked. Also the operator started as `run` would be,
from a config file, under that identity."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from vgpu_devcluster.cluster import LocalCluster
from vgpu_devcluster.install import OPERATOR_NAMESPACE, OPERATOR_USER
from vgpu_operator import contract, kubeapi
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runner import OperatorThread
from vgpu_operator.controller.volcano import VolcanoOptions
from vgpu_operator.core.volcano.restarts import RESTARTED_AT
from vgpu_operator.core.volcano.times import parse_time
from vgpu_operator.kubeapi import policy_path
from vgpu_operator.kubeapi.credentials import Credentials
from vgpu_operator.models.config import load_config

# The audit log's verbs and resources as the plan names them.
VERBS = {"create": "POST", "patch": "PATCH", "update": "PUT", "delete": "DELETE"}
KINDS = {
    "nodes": "Node",
    "configmaps": "ConfigMap",
    "daemonsets": "DaemonSet",
    "deployments": "Deployment",
    "pods": "Pod",
}
# Not the plan's to show: Events, the Lease, the policies' status and finalizer.
NOT_PLANNED = {"events", "leases", "vgpunodepolicies"}
# Annotations whose value is the time of the write (JSON of times for owned-entries).
STAMPS = {contract.ANN_DATA_CHANGED_AT, RESTARTED_AT}
STAMP_MAPS = {contract.ANN_OWNED_ENTRIES}
MASK = "<masked>"


@dataclass(frozen=True)
class Write:
    verb: str
    kind: str
    namespace: str
    name: str
    body: Any
    due: str | None = None
    code: int = 0  # the apiserver's answer (audit log only)
    at: str = ""  # when the apiserver received it (audit log only)

    def key(self) -> tuple[str, str, str, str]:
        return (self.verb, self.kind, self.namespace, self.name)

    def line(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        code = f" -> {self.code}" if self.code else ""
        due = f" (due {self.due})" if self.due else ""
        at = f" at {self.at}" if self.at else ""
        return f"{self.verb} {self.kind} {where}{due}{code}{at}"


def masked(body: Any) -> Any:
    """`body` with metadata.resourceVersion dropped and the write-time stamps masked."""
    if isinstance(body, list):
        return [masked(v) for v in body]
    if not isinstance(body, dict):
        return body
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key == "metadata" and isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "resourceVersion"}
        if key == "annotations" and isinstance(value, dict):
            value = {k: _mask_annotation(k, v) for k, v in value.items()}
        out[key] = masked(value)
    return out


def _mask_annotation(key: str, value: Any) -> Any:
    if key in STAMPS:
        return MASK
    if key in STAMP_MAPS and isinstance(value, str):
        with contextlib.suppress(ValueError):
            return {k: MASK for k in json.loads(value)}
    return value


def planned_writes(plan: Mapping[str, Any]) -> list[Write]:
    return [
        Write(w["verb"], w["kind"], w["namespace"], w["name"], w["body"], w["due"])
        for w in plan["writes"]
    ]


def operator_writes(local: LocalCluster, offset: int) -> list[Write]:
    """Every write the operator sent since `offset`, in the order the apiserver received them
    (refused ones too, with their code), but Events, the Lease and its policies' own."""
    out: list[Write] = []
    events = local.audit_events(user=OPERATOR_USER, offset=offset)
    events.sort(key=lambda e: str(e.get("requestReceivedTimestamp", "")))
    for e in events:
        ref = e.get("objectRef") or {}
        resource = str(ref.get("resource", ""))
        if e["verb"] not in VERBS or resource in NOT_PLANNED:
            continue
        kind = KINDS.get(resource, resource)
        if ref.get("subresource"):
            kind = f"{kind}/{ref['subresource']}"
        body = e.get("requestObject")
        if e["verb"] == "delete":
            body = None  # DeleteOptions, when sent: the plan shows none
        out.append(
            Write(
                VERBS[e["verb"]],
                kind,
                str(ref.get("namespace", "")),
                str(ref.get("name", "")),
                body,
                code=int(e["responseStatus"]["code"]),
                at=str(e.get("requestReceivedTimestamp", "")),
            )
        )
    return out


def same_writes(planned: list[Write], sent: list[Write], *, concurrent: Iterable[str]) -> None:
    """`sent` is `planned`, write for write: the same requests in the same order (those of a
    kind in `concurrent` in any order among themselves, where the plan has them together),
    every one accepted, none before its due time, each body the plan's once masked."""
    concurrent = set(concurrent)

    def order(writes: list[Write]) -> list[Write]:
        # a run of writes of a concurrent kind: sorted by name (the order is the controller's
        # tasks', not the plan's)
        out: list[Write] = []
        run: list[Write] = []
        for w in [*writes, None]:
            if w is not None and w.kind in concurrent and (not run or run[0].kind == w.kind):
                run.append(w)
                continue
            out += sorted(run, key=lambda x: x.name)
            run = []
            if w is not None and w.kind in concurrent:
                run.append(w)
            elif w is not None:
                out.append(w)
        return out

    want, got = order(planned), order(sent)
    listing = (
        "planned:\n"
        + "\n".join("  " + w.line() for w in planned)
        + "\nsent (audit log):\n"
        + "\n".join("  " + w.line() for w in sent)
    )
    assert [w.key() for w in got] == [w.key() for w in want], listing
    assert [w.code for w in got if not 200 <= w.code < 300] == [], listing
    for p, s in zip(want, got, strict=True):
        if p.due is not None:
            assert _time(s.at) >= _time(p.due), f"{s.line()}: before {p.due}\n{listing}"
        assert masked(s.body) == masked(p.body), (
            f"{p.line()}: body differs\nplanned: {json.dumps(masked(p.body), sort_keys=True)}"
            f"\nsent:    {json.dumps(masked(s.body), sort_keys=True)}"
        )


def _time(text: str) -> datetime:
    parsed = parse_time(text)
    assert parsed is not None, text
    return parsed


# -- the operator and the plan ----------------------------------------------------------------


def enforce_config(directory: Path, extra: str = "") -> Path:
    """The operator's config file (`run --config`, `plan --config`): enforce mode."""
    path = directory / "operator-config.yaml"
    path.write_text("mode: enforce\n" + extra)
    return path


def audited_operator(local: LocalCluster, config: Path, **volcano: Any) -> OperatorThread:
    """The controller under the operator's identity (its ServiceAccount's name and groups,
    the chart's RBAC installed by the `installed` fixture), its writes' bodies in the audit
    log; fast configuration passes, the restart settle time `plan` assumes (5 s)."""
    kubeconfig = local.request_audited_kubeconfig(
        "operator-audited",
        OPERATOR_USER,
        ("system:serviceaccounts", f"system:serviceaccounts:{OPERATOR_NAMESPACE}"),
    )
    options: dict[str, Any] = {
        "debounce_seconds": 0.2,
        "min_pass_seconds": 0.5,
        "restart_settle_seconds": 5.0,
        "stranded_checks": (),
        **volcano,
    }
    return OperatorThread(
        Credentials(kubeconfig=str(kubeconfig)),
        options=ReconcilerOptions(resync_seconds=3600),
        config=load_config(config.read_text()),
        volcano=VolcanoOptions(**options),
    ).start()


def policy_document(
    directory: Path, name: str, spec: dict[str, Any]
) -> tuple[dict[str, Any], Path]:
    doc = {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return doc, path


async def plan_json(kubeconfig: Path, policy: Path, config: Path) -> dict[str, Any]:
    """`vgpu-operator plan -f POLICY -o json --config CONFIG` (exit 1: something would change)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "vgpu_operator.commands.cli",
        "plan",
        "--kubeconfig",
        str(kubeconfig),
        "-f",
        str(policy),
        "-o",
        "json",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 1, out.decode() + err.decode()
    result: dict[str, Any] = json.loads(out)
    return result


async def quiet(
    local: LocalCluster, op: OperatorThread, seconds: float = 3.0, timeout: float = 60.0
) -> None:
    """Until the operator has sent no planned kind of write for `seconds`, its configuration
    reconciler has no pass due and no Node is being written."""
    deadline = time.monotonic() + timeout
    offset = local.audit_offset()
    since = time.monotonic()
    while True:
        await asyncio.sleep(0.25)
        controller = op.controller
        busy = controller is None or controller.volcano is None
        busy = busy or controller.volcano.due() or not controller.reconciler.idle.is_set()
        if busy or operator_writes(local, offset):
            offset, since = local.audit_offset(), time.monotonic()
        elif time.monotonic() - since >= seconds:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the operator did not settle within {timeout}s")


async def until_due(writes: Iterable[Write], margin: float = 1.0) -> None:
    """Until `margin` seconds past the latest due time of `writes` (at once if none waits)."""
    dues = [_time(w.due) for w in writes if w.due is not None]
    if dues:
        left = (max(dues) - datetime.now(UTC)).total_seconds() + margin
        await asyncio.sleep(max(0.0, left))


async def remove_policy(api: client.ApiClient, name: str, timeout: float = 30.0) -> None:
    """Delete the policy and wait until it is gone (the operator releases its finalizer)."""
    with contextlib.suppress(kubeapi.NotFound):
        await kubeapi.request(api, "DELETE", policy_path(name), field_manager=None)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await kubeapi.request(api, "GET", policy_path(name))
        except kubeapi.NotFound:
            return
        await asyncio.sleep(0.2)
