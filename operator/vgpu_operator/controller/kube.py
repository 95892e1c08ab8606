"""Credentials: Kopf and kubernetes-asyncio get them from one source.

A kubeconfig (explicit path, $KUBECONFIG, ~/.kube/config) or the in-cluster ServiceAccount.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
import yaml
from kubernetes_asyncio import client

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Credentials:
    server: str
    token: str | None
    ca_path: str | None
    insecure: bool = False

    def connection_info(self) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(
            server=self.server,
            ca_path=self.ca_path,
            token=self.token,
            insecure=self.insecure or None,
            scheme="Bearer",
        )

    def api_client(self, pool_size: int = 64) -> client.ApiClient:
        cfg = client.Configuration()
        cfg.host = self.server
        cfg.api_key = {"BearerToken": self.token or ""}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        if self.ca_path:
            cfg.ssl_ca_cert = self.ca_path
        cfg.verify_ssl = not self.insecure
        cfg.connection_pool_maxsize = pool_size
        api = client.ApiClient(configuration=cfg)
        disable_env_lookups(api)
        return api


def disable_env_lookups(api: client.ApiClient) -> None:
    """kubernetes-asyncio opens its aiohttp session with trust_env=True: every request then
    looks up ~/.netrc and the proxy variables in worker threads, which halves the request rate
    measured here (105 vs 213 PATCH/s). The operator talks to one apiserver; a proxy, if any,
    comes from the kubeconfig (`configuration.proxy`), which kubernetes-asyncio passes itself."""
    session: Any = api.rest_client.pool_manager
    session._trust_env = False


def load_credentials(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if not path and (SA_DIR / "token").exists():
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        return Credentials(
            server=f"https://{host}:{port}",
            token=(SA_DIR / "token").read_text().strip(),
            ca_path=str(SA_DIR / "ca.crt"),
        )
    path = path or str(Path.home() / ".kube" / "config")
    cfg = yaml.safe_load(Path(path).read_text())
    ctx_name = context or cfg.get("current-context")
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    token = user.get("token")
    if token is None and user.get("tokenFile"):
        token = Path(user["tokenFile"]).read_text().strip()
    if token is None:
        raise ValueError(f"kubeconfig {path}: user {ctx['user']!r} has no bearer token")
    return Credentials(
        server=cluster["server"],
        token=token,
        ca_path=cluster.get("certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
    )
