"""Discovery's shell: read what core.volcano.discovery needs, once, at start, and log what it
resolved.

Reads only, and only when the config holds an `auto`: one listing of Deployments and one of
DaemonSets across the cluster, then a GET per ConfigMap `configmaps_to_read` names (404:
absent). A read the credentials may not make (403) counts as nothing found there and is
reported, so a narrow Role ends in the defaults and a note, not in a stopped operator.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import configmap_path, get_or_none, list_all
from vgpu_operator.core.volcano.discovery import Discovery, configmaps_to_read, describe, discover
from vgpu_operator.models.config import OperatorConfig

log = logging.getLogger("vgpu_operator.discovery")

Obj = dict[str, Any]


async def _listed(api: client.ApiClient, path: str, refused: list[str]) -> list[Obj]:
    try:
        return await list_all(api, path)
    except kubeapi.Forbidden as exc:
        refused.append(f"list {path}: {exc}")
        return []


async def _get(api: client.ApiClient, path: str, refused: list[str]) -> Obj | None:
    try:
        return await get_or_none(api, path)
    except kubeapi.Forbidden as exc:
        refused.append(f"get {path}: {exc}")
        return None


async def read_and_discover(api: client.ApiClient, config: OperatorConfig) -> Discovery:
    """The config with every `auto` resolved from the cluster (the config itself, unread, when
    it has none). Raises ConfigError when what was resolved is not a valid config."""
    if not config.auto_fields():
        return Discovery(config)
    refused: list[str] = []
    deployments, daemonsets = await asyncio.gather(
        _listed(api, "/apis/apps/v1/deployments", refused),
        _listed(api, "/apis/apps/v1/daemonsets", refused),
    )
    refs = configmaps_to_read(config, deployments, daemonsets)
    found = await asyncio.gather(*(_get(api, configmap_path(ns, n), refused) for ns, n in refs))
    result = discover(config, deployments, daemonsets, [cm for cm in found if cm is not None])
    problems = tuple(f"could not {r}" for r in refused)
    return Discovery(result.config, result.resolved, result.problems + problems)


def log_discovery(discovery: Discovery) -> None:
    for line in describe(discovery):
        log.info("discovered %s", line)
    for problem in discovery.problems:
        log.warning("discovery: %s", problem)


async def discover_at_start(api: client.ApiClient, config: OperatorConfig) -> OperatorConfig:
    """What the controller runs with: the resolved config, logged."""
    discovery = await read_and_discover(api, config)
    log_discovery(discovery)
    return discovery.config
