"""Server-side apply as GitOps tools use it, and what it leaves in `metadata.managedFields`:
kubectl run against the test cluster, an apply under a field manager, `kubectl diff
--server-side`, and the paths a manager owns (a `fieldsV1` tree) read, set and compared."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

from vgpu_devcluster import binaries

Obj = dict[str, Any]
Path_ = tuple[str, ...]


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Run the cached kubectl against `kubeconfig`: (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        str(binaries.ensure("kubectl")),
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
    return int(proc.returncode or 0), out.decode(), err.decode()


def items(output: str) -> list[Obj]:
    """The objects of `kubectl ... -o json` (one object, or a List)."""
    got: Obj = json.loads(output)
    return list(got["items"]) if got.get("kind") == "List" else [got]


ARGO = "argocd-controller"  # the field manager of Argo CD's server-side apply
Obj = dict[str, Any]
Path_ = tuple[str, ...]


async def server_side_apply(
    kubeconfig: Path, manifests: str, *extra: str, manager: str = ARGO
) -> list[Obj]:
    code, out, err = await kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        f"--field-manager={manager}",
        *extra,
        "-f",
        "-",
        "-o",
        "json",
        "--show-managed-fields",
        stdin=manifests,
    )
    assert code == 0, err
    return items(out)


async def no_diff(kubeconfig: Path, manifests: str) -> None:
    """`kubectl diff --server-side` exits 0: applying these would change nothing."""
    code, out, err = await kubectl(
        kubeconfig, "diff", "--server-side", f"--field-manager={ARGO}", "-f", "-", stdin=manifests
    )
    assert code == 0, out + err


def entry(obj: Obj, manager: str) -> Obj:
    [found] = [
        m
        for m in obj["metadata"]["managedFields"]
        if m["manager"] == manager and m["operation"] == "Apply"
    ]
    return found


def owned(fields: Obj, prefix: Path_ = ()) -> set[Path_]:
    """The leaves of a managedFields `fieldsV1` tree, as paths of map keys (`f:`) and list keys
    (`k:{...}`, kept as they are); a leaf is a value that manager set."""
    out: set[Path_] = set()
    for key, sub in fields.items():
        if key == ".":  # the map or item exists: its owned contents follow
            continue
        path = (*prefix, key[2:] if key.startswith("f:") else key)
        out |= owned(sub, path) if sub else {path}
    return out


def owned_by(obj: Obj, manager: str) -> set[Path_]:
    return {
        p
        for m in obj["metadata"].get("managedFields") or []
        if m["manager"] == manager
        for p in owned(m.get("fieldsV1") or {})
    }


def step(value: Any, key: str) -> Any:
    if key.startswith("k:"):  # the list item with these key fields
        want = json.loads(key[2:])
        return next(i for i in value if all(i.get(k) == v for k, v in want.items()))
    return value[key]


def get(obj: Any, path: Path_) -> Any:
    for key in path:
        obj = step(obj, key)
    return obj


def put(obj: Any, path: Path_, value: Any) -> None:
    for key in path[:-1]:
        obj = step(obj, key) if key.startswith("k:") else obj.setdefault(key, {})
    obj[path[-1]] = copy.deepcopy(value)


def differences(a: Any, b: Any, prefix: Path_ = ()) -> set[Path_]:
    """The paths where two objects differ (lists of named items by name, other lists whole)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {
            p for k in a.keys() | b.keys() for p in differences(a.get(k), b.get(k), (*prefix, k))
        }
    named = isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
    if named and all(isinstance(i, dict) and "name" in i for i in [*a, *b]):
        pairs = zip(
            sorted(a, key=lambda i: i["name"]), sorted(b, key=lambda i: i["name"]), strict=True
        )
        return {
            p
            for x, y in pairs
            for p in differences(x, y, (*prefix, "k:" + json.dumps({"name": x["name"]})))
        }
    return set() if a == b else {prefix}


def covered(path: Path_, paths: set[Path_]) -> bool:
    return any(path[: len(p)] == p for p in paths)
