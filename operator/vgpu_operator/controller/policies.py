"""The policies as the controller reads them: Kopf's in-memory index of VGPUNodePolicies.

Kopf watches the policies (`controller.handlers`: an index and the lifecycle handlers share its
one watch); its index keeps one `PolicyEntry` per policy, updated before any handler of the same
event runs and dropped when the policy is gone. `PolicyCache` is the controller's read-only view
of it, with the one thing Kopf does not say: when the index holds every policy of the cluster.
No node pass may run before that: with a policy not yet known, its nodes would look like nodes
of a deleted policy and be released. Kopf lists before it watches, but tells no one when the
listing is in, and with no policy at all no handler ever runs; so the controller lists the
policies once itself (names and resourceVersions only are compared) and calls the index synced
when it holds each of them at that version or newer. A policy deleted between the two listings
never reaches the index: the listing is then taken again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from vgpu_operator import kubeapi
from vgpu_operator.controller.kept import PolicyEntry, policy_entry

log = logging.getLogger("vgpu_operator.controller")

INDEX = "policies"  # the Kopf index's id, and the keyword its handlers receive it by
RELIST_SECONDS = 2.0  # how often the listing is taken again while the index lags behind it

# Kopf's index: policy name -> its store of entries (one per policy: names are cluster-unique).
KopfIndex = Mapping[str, Any]


def index_entry(body: Mapping[str, Any]) -> dict[str, PolicyEntry]:
    """What Kopf's index keeps of one policy (`@kopf.index`): its parsed form under its name."""
    name = str((body.get("metadata") or {}).get("name", ""))
    return {name: policy_entry(body)}


class PolicyCache:
    """The policies by name, read from Kopf's index; `synced` once it holds the cluster's."""

    def __init__(self, index: KopfIndex | None = None) -> None:
        self.index: KopfIndex = index if index is not None else {}
        self.synced = asyncio.Event()

    @property
    def items(self) -> dict[str, PolicyEntry]:
        return dict(self._entries())

    def get(self, name: str) -> PolicyEntry | None:
        store = self.index.get(name)
        return next(iter(store), None) if store is not None else None

    def __len__(self) -> int:
        return len(self.index)

    def _entries(self) -> Iterator[tuple[str, PolicyEntry]]:
        for name, store in self.index.items():
            entry = next(iter(store), None)
            if entry is not None:
                yield name, entry

    def holds(self, listed: Mapping[str, str]) -> bool:
        """Every listed policy is in the index, at the listed resourceVersion or newer."""
        for name, version in listed.items():
            entry = self.get(name)
            if entry is None or not newer_or_same(entry.resource_version, version):
                return False
        return True

    async def wait_listed(self, api: kubeapi.Client) -> None:
        """Until the index holds every policy of a listing taken now (`synced` set)."""
        while not self.synced.is_set():
            try:
                listed = await list_versions(api)
            except kubeapi.ApiError as exc:  # (the Kopf watch is retrying too)
                log.warning("listing the policies failed (%s); again in %.0fs", exc, RELIST_SECONDS)
                await asyncio.sleep(RELIST_SECONDS)
                continue
            for _ in range(int(RELIST_SECONDS / 0.05)):
                if self.holds(listed):
                    self.synced.set()
                    log.info("policy index synced (%d policies)", len(self))
                    return
                await asyncio.sleep(0.05)


async def list_versions(api: kubeapi.Client) -> dict[str, str]:
    """Each policy's name and resourceVersion, from one listing."""
    listing = await kubeapi.request(api, "GET", kubeapi.policy_path())
    out: dict[str, str] = {}
    for item in listing.get("items") or []:
        meta = item.get("metadata") or {}
        out[str(meta.get("name", ""))] = str(meta.get("resourceVersion", ""))
    return out


def newer_or_same(seen: str, listed: str) -> bool:
    """resourceVersions are opaque, but etcd's are integers; compare when both parse."""
    try:
        return int(seen) >= int(listed)
    except ValueError:
        return seen == listed
