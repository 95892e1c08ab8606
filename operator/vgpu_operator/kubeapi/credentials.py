"""Credentials: every kubeconfig kubectl accepts, or the in-cluster ServiceAccount; renewed.

Where they come from is decided in `kubeapi.source` (controller-runtime's order, shared with the
node agent's `kubeapi.lite`): `--kubeconfig`, $KUBECONFIG, the in-cluster ServiceAccount, then
`~/.kube/config`. The loading is
kubernetes-asyncio's own (`config.load_kube_config`, `InClusterConfigLoader`): CA file or inline
data, client certificate and key (file or data), token, `tokenFile`, `exec` plugins (token or
client certificate), `--context`, several files merged. An exec plugin gets `exec_timeout`
seconds (30 by default), then it is stopped and the load fails (`kubeapi.exec_plugin`).

The library reads a `tokenFile` once and runs an exec plugin only when asked, so the project owns
renewal (`renew`):
- periodically: a token file (kubeconfig `tokenFile`, the in-cluster token) is read again every
  minute, as client-go does; an exec plugin runs again shortly before the `expirationTimestamp`
  it returned;
- on a 401: `kubeapi.request` renews at once and retries once.
Renewal rewrites the Authorization token of the live client; a client certificate is loaded into
the TLS context when the client is made (a rotated certificate takes a restart, as for kubectl).

Kopf logs in with the same credentials (`connection_info`), and calls it again on a 401.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

from vgpu_operator.kubeapi import source
from vgpu_operator.kubeapi.aio import AuthHealth, Client
from vgpu_operator.kubeapi.exec_plugin import EXEC_TIMEOUT, exec_timeout, install_bounds
from vgpu_operator.kubeapi.source import (
    ENV_SA_DIR,
    SA_DIR,
    TOKEN_FILE_PERIOD,
    CredentialsError,
    Source,
    any_exists,
    service_env,
)

if TYPE_CHECKING:
    import kopf

__all__ = [
    "ENV_SA_DIR",
    "SA_DIR",
    "TOKEN_FILE_PERIOD",
    "Credentials",
    "CredentialsError",
    "add_connection_arguments",
    "disable_env_lookups",
    "resolve",
]

log = logging.getLogger("vgpu_operator.kubeapi")
EXEC_EARLY = 60.0  # run an exec plugin again this long before its token expires


@dataclass(frozen=True)
class Credentials(Source):
    """Where the credentials come from (`kubeapi.source`); `client()` and `configuration()`
    load them."""

    exec_timeout: float = EXEC_TIMEOUT  # seconds an exec plugin may take (kubeapi.exec_plugin)

    # -- loading ----------------------------------------------------------------------------
    async def configuration(self) -> client.Configuration:
        """A fresh Configuration with everything loaded now (files read, plugins run)."""
        cfg = client.Configuration()
        await self._load_into(cfg)
        return cfg

    async def _load_into(self, cfg: client.Configuration) -> Renewal:
        if self.in_cluster:
            host, port = service_env(self.environ)
            in_cluster = InClusterConfigLoader(
                token_filename=str(self.sa_dir / "token"),
                cert_filename=str(self.sa_dir / "ca.crt"),
                try_refresh_token=False,  # renewal is ours (`Renewal`), not the library's
                environ={"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port},
            )
            try:
                in_cluster.load_and_set(cfg)
            except Exception as exc:
                raise CredentialsError(f"{self.describe()}: {exc}") from exc
            _trim_token(cfg)
            return Renewal(self, token_file=True, expires=None)
        if not any_exists(self.kubeconfig or ""):
            raise CredentialsError(f"{self.describe()}: no such file")
        install_bounds()
        try:
            with exec_timeout(self.exec_timeout):
                loader = await kube_config.load_kube_config(
                    config_file=self.kubeconfig,
                    context=self.context,
                    client_configuration=cfg,
                    persist_config=False,
                )
        except Exception as exc:
            raise CredentialsError(f"{self.describe()}: {type(exc).__name__}: {exc}") from exc
        _trim_token(cfg)
        user: Any = loader._user
        exec_plugin = user is not None and "exec" in user
        token_file = user is not None and "tokenFile" in user and not exec_plugin
        expiry = getattr(loader, "exec_plugin_expiry", None) if exec_plugin else None
        return Renewal(self, token_file=token_file, exec_plugin=exec_plugin, expires=expiry)

    async def client(
        self,
        *,
        pool_size: int = 16,
        user_agent: str | None = None,
        auth: AuthHealth | None = None,
    ) -> Client:
        """An API client with these credentials, renewed as the module says."""
        cfg = client.Configuration()
        renewal = await self._load_into(cfg)
        cfg.connection_pool_maxsize = pool_size
        renewal.install(cfg)
        api = Client(cfg, renew=renewal.renew, auth=auth, user_agent=user_agent)
        disable_env_lookups(api)
        return api

    async def connection_info(self) -> kopf.ConnectionInfo:
        """The same credentials for Kopf's login handler (Kopf calls it again on a 401).
        Kopf is imported here, not with the module: the node agent loads credentials too and
        runs without Kopf (about 3 MiB of its resident memory, bench/agent_cost.py)."""
        import kopf

        cfg = await self.configuration()
        token = _bearer(cfg)
        expiration = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=TOKEN_FILE_PERIOD * 5)
        return kopf.ConnectionInfo(
            server=str(cfg.host),
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl or None,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
            token=token,
            scheme="Bearer" if token else None,
            # Kopf logs in again after this; a rotated token file is picked up even before
            # the old token is refused.
            expiration=expiration if token else None,
        )


@dataclass
class Renewal:
    """How one client's token is kept current (installed as the Configuration's key hook,
    which kubernetes-asyncio calls before every request's auth header is built)."""

    credentials: Credentials
    token_file: bool = False
    exec_plugin: bool = False
    expires: dt.datetime | None = None
    clock: Callable[[], float] = time.monotonic
    _next: float = field(default=0.0)
    _pending: asyncio.Task[bool] | None = None

    def install(self, cfg: client.Configuration) -> None:
        self._schedule()
        if self.token_file or (self.exec_plugin and self.expires is not None):
            cfg.refresh_api_key_hook = self._hook

    def _schedule(self) -> None:
        now = self.clock()
        if self.exec_plugin:
            if self.expires is None:
                self._next = float("inf")  # only on a 401
                return
            left = (self.expires - dt.datetime.now(dt.UTC)).total_seconds()
            self._next = now + max(1.0, left - EXEC_EARLY)
        else:
            self._next = now + TOKEN_FILE_PERIOD

    def _hook(self, cfg: client.Configuration) -> Any:
        if self.clock() < self._next:
            return None  # the common case: nothing to await
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(self.renew(cfg))
        return self._wait_pending()

    async def _wait_pending(self) -> None:
        assert self._pending is not None
        try:
            await asyncio.shield(self._pending)
        except Exception as exc:  # keep the current token; a 401 or the next period retries
            log.warning("could not renew the credentials: %s", exc)

    async def renew(self, cfg: client.Configuration) -> bool:
        """Load the credentials again; copy the new token into `cfg`. True if it changed."""
        fresh = client.Configuration()
        try:
            renewal = await self.credentials._load_into(fresh)
        finally:
            self._schedule()  # a failure retries on the next period, not on every request
        self.expires = renewal.expires
        self._schedule()
        old, new = _bearer(cfg), _bearer(fresh)
        if new is None or new == old:
            return False
        cfg.api_key["BearerToken"] = fresh.api_key["BearerToken"]
        cfg.api_key_prefix = dict(fresh.api_key_prefix)
        return True


def resolve(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: dict[str, str] | None = None,
) -> Credentials:
    """Which credentials to use, in controller-runtime's order (`kubeapi.source.resolve`)."""
    found = source.resolve(kubeconfig, context, environ=environ)
    return Credentials(found.kubeconfig, found.context, found.sa_dir, found.environ)


def disable_env_lookups(api: client.ApiClient) -> None:
    """kubernetes-asyncio 36.1.0 opens its aiohttp session with trust_env=True
    (kubernetes_asyncio/client/rest.py, `aiohttp.ClientSession(..., trust_env=True)`): every
    request then looks up ~/.netrc and the proxy variables in worker threads, which halves the
    request rate measured here (105 vs 213 PATCH/s). The operator talks to one apiserver; a
    proxy, if any, comes from the kubeconfig (`proxy-url`), which the library passes itself.
    tests/unit/kubeapi/test_credentials.py fails if the library's session changes shape."""
    session: Any = api.rest_client.pool_manager
    if not hasattr(session, "_trust_env"):
        raise RuntimeError("kubernetes-asyncio's session changed: review disable_env_lookups")
    session._trust_env = False


def _trim_token(cfg: client.Configuration) -> None:
    """Whitespace around the token (a token file written by `echo`, or by `kubectl create token >
    file`, ends in a newline) is dropped, as client-go does (k8s.io/client-go@v0.35.4:
    transport/token_source.go, `strings.TrimSpace`); kept, it fails every request in aiohttp's
    header check ("Forbidden control character detected in headers")."""
    value = cfg.api_key.get("BearerToken")
    if value:
        cfg.api_key["BearerToken"] = str(value).strip()


def _bearer(cfg: client.Configuration) -> str | None:
    value = cfg.api_key.get("BearerToken")
    if not value:
        return None
    text = str(value)
    return text.split(" ", 1)[1] if text.startswith("Bearer ") else text


def add_connection_arguments(parser: Any) -> None:
    """`--kubeconfig` and `--context`, as every command takes them (`resolve`'s order)."""
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, in-cluster, ~/.kube/config")
    parser.add_argument("--context", help="kubeconfig context")
