"""`controller.snapshot.list_all` on the real apiserver: the next page is asked for before the
last is decoded, its `continue` token read off the head of the page's JSON, where the apiserver
writes a typed list's `metadata` before its `items` (k8s.io/apimachinery@v0.35.4:
pkg/apis/meta/v1/types.go `ListMeta`, k8s.io/api@v0.35.4:core/v1/types.go `ConfigMapList`); a
custom resource's list is encoded from a map, its keys sorted (`items` first), and is then read
one page after another."""

from __future__ import annotations

import asyncio
import json

from kubernetes_asyncio import client

from vgpu_operator import kubeapi
from vgpu_operator.controller.snapshot import continue_token, list_all
from vgpu_operator.kubeapi.credentials import Credentials

COUNT = 130


async def test_every_page_is_listed_in_order_and_the_head_gives_the_token(
    api: client.ApiClient, namespace: str, installed: Credentials
) -> None:
    """(`installed`: the CRDs, for a custom resource's list.)"""
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    names = [f"cm-{i:03d}" for i in range(COUNT)]
    sem = asyncio.Semaphore(16)

    async def create(name: str) -> None:
        async with sem:
            body = {"metadata": {"name": name, "labels": {"t": "pages"}}, "data": {"k": name}}
            await kubeapi.request(api, "POST", path, body=body, field_manager=None)

    await asyncio.gather(*(create(n) for n in names))
    query = {"limit": "50", "labelSelector": "t=pages"}
    raw = await kubeapi.request_bytes(api, path, query=query)
    token = continue_token(raw)
    assert token is not None and token == json.loads(raw)["metadata"]["continue"]

    listed = await list_all(api, path, query, keep=lambda cm: {"name": cm["metadata"]["name"]})
    assert [cm["name"] for cm in listed] == names  # three pages, each once, in the list's order

    # A custom resource's list: `items` comes before `metadata` (the head has no token).
    crd_raw = await kubeapi.request_bytes(api, kubeapi.policy_path(), query={"limit": "1"})
    assert crd_raw.index(b'"items"') < crd_raw.index(b'"metadata"')
    assert continue_token(crd_raw) is None
