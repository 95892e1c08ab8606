"""Times read from the cluster: RFC 3339 strings clamped into a range date arithmetic survives,
when a ConfigMap's data last changed, when a pod started, and whether a pod may have started
before a change (Kubernetes keeps pod start times in whole seconds). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from vgpu_operator import contract
from vgpu_operator.core.volcano.snapshot import annotations_of, meta

# Times read from the cluster are clamped into this range: what anyone may write into an
# annotation (`9999-12-31T23:59:59.5Z`) must not overflow the date arithmetic done with it.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 time (naive: UTC) clamped into [EARLIEST, LATEST]; None if it is none."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        return min(max(parsed, EARLIEST), LATEST)
    except (ValueError, OverflowError):
        return None


def known_after(changed: datetime) -> datetime:
    """The first time a pod start can be told apart from a change at `changed`.

    Kubernetes keeps pod start times in whole seconds: a pod that "started at 12:00:07" started
    somewhere in [12:00:07, 12:00:08), so a pod that started in the second of a change may have
    started before it, however precisely the change is dated. Only a start in a later second is
    known to be after it.
    """
    return changed.replace(microsecond=0) + timedelta(seconds=1)


def started_before(started: datetime, changed: datetime) -> bool:
    """Whether a pod that started at `started` (whole seconds) may have started before a change.

    The operator dates its own changes to the microsecond (`status.change_stamp`): a pod that
    started in the same second may have read the old content, and counts as started before
    (one restart too many is harmless; a plugin left on a configuration it never read is not).
    Restarts wait for `known_after(changed)`, so their replacements cannot be taken for stale.
    A whole-second time (a foreign edit dated by managedFields, or a creation) says nothing
    finer than the pod's: a pod that started in that second counts as started after it, or
    every fresh install, whose pods start in the second their ConfigMaps are created, would be
    restarted once for nothing.
    """
    if changed.microsecond == 0:
        return started < changed
    return started < known_after(changed)


def pod_started(pod: Mapping[str, Any]) -> datetime | None:
    status = pod.get("status") or {}
    return parse_time(status.get("startTime")) or parse_time(meta(pod).get("creationTimestamp"))


def data_changed_at(cm: Mapping[str, Any]) -> datetime | None:
    """When the ConfigMap's data last changed: the operator's stamp, else the newest
    managedFields entry that owns data, else its creation."""
    stamped = parse_time(annotations_of(cm).get(contract.ANN_DATA_CHANGED_AT))
    if stamped:
        return stamped
    times = [
        parse_time(mf.get("time"))
        for mf in meta(cm).get("managedFields") or []
        if isinstance(mf, Mapping) and "f:data" in (mf.get("fieldsV1") or {})
    ]
    known = [t for t in times if t is not None]
    return max(known) if known else parse_time(meta(cm).get("creationTimestamp"))
