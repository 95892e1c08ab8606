"""The operator's API client skips aiohttp's per-request environment lookups."""

from __future__ import annotations

from vgpu_operator.controller.kube import Credentials


async def test_operator_client_does_not_trust_env_per_request() -> None:
    api = Credentials(server="https://127.0.0.1:1", token="t", ca_path=None).api_client()
    try:
        assert api.rest_client.pool_manager.trust_env is False
        assert api.rest_client.pool_manager.connector.limit == 64
    finally:
        await api.close()
