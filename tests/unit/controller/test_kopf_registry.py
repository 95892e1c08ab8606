"""Kopf's registry is what docs/architecture.md says it is: the table "Kopf's registry" lists
every handler `build_registry` registers (id, kind, resource), no more and no fewer."""

from __future__ import annotations

import re
from pathlib import Path

import kopf

from vgpu_operator.controller.app import Settings
from vgpu_operator.controller.handlers import build_registry
from vgpu_operator.controller.reconciler import ReconcilerOptions
from vgpu_operator.controller.runtime import Runtime
from vgpu_operator.kubeapi.credentials import resolve

ARCHITECTURE = Path(__file__).resolve().parents[3] / "docs" / "architecture.md"
ROW = re.compile(r"^\|\s*`(?P<id>[^`]+)`\s*\|\s*(?P<kind>[^|]*?)\s*\|\s*(?P<resource>[^|]*?)\s*\|$")


def registered(registry: kopf.OperatorRegistry) -> set[tuple[str, str, str]]:
    """(handler id, kind, resource plural) of every handler in the registry."""
    out: set[tuple[str, str, str]] = set()
    for name in ("_activities", "_indexing", "_watching", "_spawning", "_changing", "_webhooks"):
        for h in getattr(registry, name).get_all_handlers():
            activity = getattr(h, "activity", None)
            reason = getattr(h, "reason", None)
            if activity is not None:
                kind = activity.value
            elif reason is not None:
                kind = reason.value
            elif getattr(h, "initial", None):
                kind = "resume"  # Kopf's resuming handlers: no reason, initial=True
            else:
                kind = name.strip("_")
            selector = getattr(h, "selector", None)
            plural = str(selector.plural or selector.any_name or "") if selector else ""
            out.add((str(h.id).rsplit(".", 1)[-1], kind, plural))
    return out


def documented() -> set[tuple[str, str, str]]:
    text = ARCHITECTURE.read_text()
    table = text.split("Kopf's registry, as", 1)[1].split("\n\n", 2)[1]
    rows = set()
    for line in table.splitlines():
        if (m := ROW.match(line.strip())) is not None:
            rows.add((m["id"], m["kind"].split(" (")[0], m["resource"].strip("`")))
    return rows


def runtime(tmp_path: Path, *, observe: bool = False) -> Runtime:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    options = ReconcilerOptions(observe=observe)
    return Runtime(Settings(credentials=resolve(str(kubeconfig), None), options=options))


def test_the_registry_is_the_documented_table(tmp_path: Path) -> None:
    found = registered(build_registry(runtime(tmp_path)))
    assert found == documented()
    assert {kind for _, kind, _ in found} >= {"authentication", "startup", "cleanup"}


def test_the_table_reader_sees_every_row() -> None:
    assert ("startup", "startup", "") in documented()


def test_the_policy_finalizer_is_kopfs_in_enforce_and_absent_in_observe(tmp_path: Path) -> None:
    """Kopf adds its finalizer when a deletion handler is not optional: in enforce, so a deleted
    policy waits for its nodes' release; never in observe, which releases no node."""
    for observe, required in ((False, True), (True, False)):
        registry = build_registry(runtime(tmp_path, observe=observe))
        deletions = [h for h in registry._changing.get_all_handlers() if h.id == "policy_deleted"]
        assert [h.requires_finalizer for h in deletions] == [required]
