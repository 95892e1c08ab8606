"""The operator's API client skips aiohttp's per-request environment lookups.

kubernetes-asyncio 36.1.0 hard-codes `trust_env=True` (kubernetes_asyncio/client/rest.py);
`kubeapi.credentials.disable_env_lookups` turns it off on the client the library's own loader
configured. These tests fail if the library changes underneath that patch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vgpu_operator.kubeapi.credentials import Credentials, disable_env_lookups


def _kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": "https://127.0.0.1:1",
                            "insecure-skip-tls-verify": True,
                        },
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


async def test_operator_client_does_not_trust_env_per_request(tmp_path: Path) -> None:
    api = await Credentials(kubeconfig=str(_kubeconfig(tmp_path))).client(pool_size=64)
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert api.rest_client.pool_manager.connector.limit == 64
    finally:
        await api.close()


async def test_the_library_still_opens_its_session_trusting_the_environment(
    tmp_path: Path,
) -> None:
    """The patch exists because of this; if a release drops trust_env, drop the patch."""
    from kubernetes_asyncio import client

    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:1"
    api = client.ApiClient(configuration=cfg)
    try:
        assert api.rest_client.pool_manager.trust_env is True
    finally:
        await api.close()


async def test_a_session_of_another_shape_is_refused_loudly() -> None:
    class Odd:
        class rest_client:
            pool_manager = object()

    with pytest.raises(RuntimeError, match="review disable_env_lookups"):
        disable_env_lookups(Odd())  # type: ignore[arg-type]
