"""JSON merge patch (RFC 7386), as the apiserver applies `application/merge-patch+json`.

Used by the tests to replay the planner's patches on a node and plan again (idempotence), and by
anything else that needs to know what a node looks like after a write.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """Return `target` with `patch` merged in; neither argument is modified.

    Objects merge key by key, `null` deletes a key, and anything else (lists included) replaces
    the value wholesale.
    """
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result
