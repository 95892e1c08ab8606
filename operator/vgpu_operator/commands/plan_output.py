"""What `vgpu-operator plan` prints: the text of a plan (`-o table`) and its JSON (`-o json`,
`-o yaml`), with every write in the order the operator sends it."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from vgpu_operator.core.plan import Plan


def _owner(name: str | None) -> str:
    return name or "(none)"


def _stamp(t: datetime | None) -> str | None:
    return None if t is None else t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _write(verb: str, kind: str, namespace: str, name: str, body: Any, due: Any) -> dict[str, Any]:
    return {
        "verb": verb,
        "kind": kind,
        "namespace": namespace,
        "name": name,
        "body": body,
        "due": _stamp(due),
    }


def writes_json(p: Plan) -> list[dict[str, Any]]:
    """Every write in the order the operator sends it: the node PATCHes, then the write plan of
    the configuration pass (ConfigMaps, DaemonSet PATCHes, restarts), each with its exact body
    and, for one that waits, when it falls due (`due`: null, it goes now)."""
    out = [_write("PATCH", "Node", "", n.node, n.patch, None) for n in p.nodes if n.patch]
    out += [_write(c.verb, c.kind, c.namespace, c.name, c.body, None) for c in p.configmaps]
    out += [_write(w.verb, w.kind, w.namespace, w.name, w.body, w.due) for w in p.workloads]
    for r in p.restarts:
        out.append(
            _write(r.verb, r.kind, r.namespace, r.name, r.body, r.due) | {"reason": r.reason}
        )
        out += [_write("DELETE", "Pod", r.namespace, pod, None, r.due) for pod in r.pods]
    return out


def format_text(p: Plan, names: list[str]) -> str:
    out = [f"Plan for {', '.join(names)}:"]
    if not p.changes and not any(n.problems for n in p.nodes):
        out.append("  nothing would change.")
    entering = [n for n in p.nodes if n.enters and n.patch is not None]
    leaving = [n for n in p.nodes if n.leaves and n.patch is not None]
    if entering or leaving:
        out.append("\nNodes entering or leaving a pool:")
        out += [f"  + {n.node} -> {n.new_owner} ({n.new_mode})" for n in entering]
        out += [f"  - {n.node} <- {n.old_owner} (to {_owner(n.new_owner)})" for n in leaving]
    updated = [n for n in p.nodes if n.patch is not None]
    if updated:
        out.append("\nNode writes (one merge PATCH each):")
        for n in updated:
            line = f"  {n.node}: {n.action} {_owner(n.old_owner)}/{n.old_mode or '-'} -> "
            line += f"{_owner(n.new_owner)}/{n.new_mode or '-'}"
            if n.disruptive:
                line += f"  DISRUPTIVE: {n.disruptive}"
                line += f"; {len(n.gpu_pods)} GPU pod(s) running"
                line += f": {', '.join(n.gpu_pods)}" if n.gpu_pods else ""
            elif n.change == "restart":
                line += "  (its device plugin pod restarts)"
            out.append(line)
            if n.step:
                out.append(f"    rollout: {n.step}")
    held = [n for n in p.nodes if n.patch is None and n.step]
    if held:
        out.append("\nNodes the rollout holds back:")
        out += [f"  {n.node}: {n.step}" for n in held]
    blocked = [n for n in p.nodes if n.problems]
    if blocked:
        out.append("\nNodes not written:")
        for n in blocked:
            out.append(f"  {n.node} ({n.action}):")
            out += [f"    {problem}" for problem in n.problems]
    if p.rollout:
        out.append("\nRollout order (maxUnavailable at a time):")
        for i, wave in enumerate(p.rollout, start=1):
            when = "now" if wave.now else (f"halted: {wave.halted}" if wave.halted else "then")
            out.append(f"  {i}. {wave.policy}: {', '.join(wave.nodes)} ({when})")
    for cm in p.configmaps:
        verb = "create" if cm.create else "change"
        entries = f" (entries: {', '.join(cm.entries)})" if cm.entries else ""
        out.append(f"\nConfigMap {cm.namespace}/{cm.name}: {verb}{entries}")
        out += ["  " + line for line in cm.diff.splitlines()]
    for w in p.workloads:
        when = f", due {_stamp(w.due)}: it waits for the restart limits" if w.due else ""
        out.append(f"\n{w.kind} {w.namespace}/{w.name}: PATCH (restarts its pods{when})")
        out += [f"  {what}" for what in w.what]
        out.append("  " + json.dumps(w.body, separators=(",", ":"), sort_keys=True))
    if p.restarts:
        out.append("\nRestarts:")
        for r in p.restarts:
            when = f" (due {_stamp(r.due)})" if r.due else ""
            on = f" (the device plugin pod on {r.action.node})" if r.action.node else ""
            out.append(f"  {r.kind} {r.namespace}/{r.name}{on}{when}: {r.reason}")
    if p.appearing:
        out.append("\nFindings that would appear:")
        out += [f"  [{f.severity}] {f.id}: {f.message}" for f in p.appearing]
    if p.resolved:
        out.append("\nFindings that would go:")
        out += [f"  [{f.severity}] {f.id}: {f.message}" for f in p.resolved]
    if p.notes:
        out.append("\nNotes:")
        out += [f"  {note}" for note in p.notes]
    return "\n".join(out) + "\n"


def to_json(p: Plan, names: list[str]) -> dict[str, Any]:
    return {
        "policies": names,
        "changes": p.changes,
        "nodes": [
            {
                "node": n.node,
                "action": n.action,
                "from": {"policy": n.old_owner, "mode": n.old_mode},
                "to": {"policy": n.new_owner, "mode": n.new_mode},
                "enters": n.enters,
                "leaves": n.leaves,
                "change": n.change,
                "disruptive": n.disruptive,
                "gpuPods": list(n.gpu_pods),
                "step": n.step,
                "patch": n.patch,
                "problems": list(n.problems),
            }
            for n in p.nodes
        ],
        "rollout": [
            {"policy": w.policy, "nodes": list(w.nodes), "now": w.now, "halted": w.halted}
            for w in p.rollout
        ],
        "configMaps": [
            {
                "namespace": c.namespace,
                "name": c.name,
                "create": c.create,
                "entries": list(c.entries),
                "diff": c.diff,
            }
            for c in p.configmaps
        ],
        "workloads": [
            {
                "kind": w.kind,
                "namespace": w.namespace,
                "name": w.name,
                "what": list(w.what),
                "body": w.body,
                "due": _stamp(w.due),
            }
            for w in p.workloads
        ],
        "restarts": [
            {
                "kind": r.kind,
                "namespace": r.namespace,
                "name": r.name,
                "reason": r.reason,
                "node": r.action.node,  # a plugin pod's node (None: a rollout restart)
                "due": _stamp(r.due),
            }
            for r in p.restarts
        ],
        "writes": writes_json(p),
        "findings": {
            "appearing": [f.model_dump(mode="json") for f in p.appearing],
            "resolved": [f.model_dump(mode="json") for f in p.resolved],
        },
        "notes": list(p.notes),
    }
