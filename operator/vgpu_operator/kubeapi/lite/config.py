"""The node agent's credentials, read with the standard library: where the apiserver is, the TLS
context to reach it, and the bearer token (if any), kept current.

`kubeapi.source.resolve` decides where they come from (as for the controller). From there:
- in-cluster: the ServiceAccount's `token` and `ca.crt`, and KUBERNETES_SERVICE_HOST/PORT (the
  agent's DaemonSet);
- a kubeconfig (JSON, which is YAML; a file in YAML is read with PyYAML, imported then only): its
  current context or `--context`, several files ':'-separated and merged as kubectl merges them
  (the first file to name a cluster, user or context wins; paths relative to the file naming
  them). Of the cluster: `server`, `certificate-authority[-data]`, `insecure-skip-tls-verify`,
  `tls-server-name`. Of the user: `token`, `tokenFile`, `client-certificate[-data]` and
  `client-key[-data]`. An `exec` plugin, an `auth-provider`, basic auth, impersonation and
  `proxy-url` are refused with the field named: the agent runs in a pod, where none of them is
  needed (the controller's client, `kubeapi.credentials`, takes every kubeconfig kubectl does).

A token from a file (`tokenFile`, the in-cluster token, which the kubelet rotates) is read again
every TOKEN_FILE_PERIOD seconds, as client-go does, and at once when the apiserver answers 401;
a token written in a kubeconfig is read again from the kubeconfig on a 401. Whitespace around a
token is dropped (k8s.io/client-go@v0.35.4: transport/token_source.go, `strings.TrimSpace`).
A client certificate is loaded once, when the client is made (a rotated one takes a restart, as
for kubectl).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu_operator.kubeapi.lite.http import Endpoint
from vgpu_operator.kubeapi.source import (
    TOKEN_FILE_PERIOD,
    CredentialsError,
    Source,
    any_exists,
    service_env,
)

log = logging.getLogger("vgpu_operator.kubeapi")

REFUSED_USER = {
    "exec": "an exec credential plugin",
    "auth-provider": "an auth provider plugin",
    "username": "basic authentication",
    "password": "basic authentication",
    "as": "impersonation",
    "as-uid": "impersonation",
    "as-groups": "impersonation",
    "as-user-extra": "impersonation",
}
REFUSED_CLUSTER = {"proxy-url": "a proxy"}


@dataclass
class Token:
    """The bearer token, loaded by `load` (None: no token, e.g. a client certificate) and again
    after `period` seconds or on `renew()`."""

    load: Callable[[], str | None]
    period: float = float("inf")
    clock: Callable[[], float] = time.monotonic
    value: str | None = None
    _loaded_at: float = field(default=-float("inf"))

    def current(self) -> str | None:
        if self.clock() - self._loaded_at >= self.period:
            self.renew()
        return self.value

    def renew(self) -> bool:
        """Load again now; True when the token changed. A failed load keeps the token held
        (a 401 or the next period tries again)."""
        try:
            return self.load_now()
        except (OSError, CredentialsError) as exc:
            log.warning("could not read the token again: %s", exc)
            return False

    def load_now(self) -> bool:
        """Load now (its errors raised); True when the token changed."""
        self._loaded_at = self.clock()  # a failure too waits for the next period
        fresh = self.load()
        fresh = fresh.strip() if fresh else None
        changed = fresh != self.value
        self.value = fresh
        return changed


@dataclass
class Settings:
    """How to reach the apiserver and log in."""

    endpoint: Endpoint
    token: Token
    describe: str  # where these came from, for errors

    @property
    def url(self) -> str:
        scheme = "https" if self.endpoint.ssl is not None else "http"
        return f"{scheme}://{self.endpoint.authority}"


def load(source: Source) -> Settings:
    """The settings of `source`, read now (files read, the first token loaded);
    CredentialsError naming the file and field when something is missing or not supported."""
    settings = _in_cluster(source) if source.in_cluster else _kubeconfig(source)
    try:
        settings.token.load_now()
    except OSError as exc:
        raise CredentialsError(f"{settings.describe}: the token: {exc}") from exc
    return settings


def _in_cluster(source: Source) -> Settings:
    host, port = service_env(source.environ)
    ca, token = source.sa_dir / "ca.crt", source.sa_dir / "token"
    for path in (ca, token):
        if not path.is_file():
            raise CredentialsError(f"{source.describe()}: no {path.name} in {source.sa_dir}")
    endpoint = Endpoint(host, _port(port, source.describe()), _tls(source.describe(), ca=ca))
    return Settings(endpoint, Token(token.read_text, TOKEN_FILE_PERIOD), source.describe())


@dataclass(frozen=True)
class _Entry:
    value: dict[str, Any]
    base: Path  # the directory of the file that named it: relative paths start there


@dataclass(frozen=True)
class _Chosen:
    where: str
    cluster: _Entry
    user: _Entry
    user_name: str


def _kubeconfig(source: Source) -> Settings:
    chosen = _choose(source)
    return _settings(chosen, _token(chosen, source))


def _choose(source: Source) -> _Chosen:
    """The context's cluster and user, from the merged files."""
    where = source.describe()
    if not any_exists(source.kubeconfig or ""):
        raise CredentialsError(f"{where}: no such file")
    files = [Path(p).expanduser() for p in (source.kubeconfig or "").split(os.pathsep) if p]
    merged: dict[str, dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    current = ""
    for path in (f for f in files if f.exists()):
        doc = _read(path)
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in doc.get(section) or []:
                if isinstance(item, dict) and item.get("name") is not None:
                    body = item.get(key) or {}
                    merged[section].setdefault(str(item["name"]), _Entry(body, path.parent))
        current = current or str(doc.get("current-context") or "")
    name = source.context or current
    if not name:
        raise CredentialsError(f"{where}: no current-context; pass --context")
    context = merged["contexts"].get(name)
    if context is None:
        raise CredentialsError(f"{where}: no context {name!r}")
    cluster = merged["clusters"].get(str(context.value.get("cluster") or ""))
    if cluster is None:
        raise CredentialsError(f"{where}: context {name!r} names no cluster of the kubeconfig")
    user_name = str(context.value.get("user") or "")
    user = merged["users"].get(user_name) or _Entry({}, cluster.base)
    return _Chosen(where, cluster, user, user_name)


def _settings(chosen: _Chosen, token: Token) -> Settings:
    where, cluster, user = chosen.where, chosen.cluster, chosen.user
    for key, what in REFUSED_CLUSTER.items():
        if cluster.value.get(key):
            raise CredentialsError(
                f"{where}: the cluster sets {key!r} ({what}), which the node agent's client does "
                "not support; reach the apiserver directly, or run the agent in-cluster"
            )
    for key, what in REFUSED_USER.items():
        if user.value.get(key):
            raise CredentialsError(
                f"{where}: user {chosen.user_name!r} sets {key!r} ({what}), which the node "
                "agent's client does not support; give the user a token, a tokenFile or a "
                "client certificate, or run the agent in-cluster (its ServiceAccount token)"
            )
    server = str(cluster.value.get("server") or "")
    parts = urllib.parse.urlsplit(server)
    host = parts.hostname
    if parts.scheme not in ("https", "http") or not host:
        raise CredentialsError(f"{where}: the cluster's server {server!r} is not an http(s) URL")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise CredentialsError(f"{where}: the cluster's server {server!r}: {exc}") from exc
    tls: ssl.SSLContext | None = None
    if parts.scheme == "https":
        tls = _tls(
            where,
            ca=_file(cluster, "certificate-authority"),
            ca_data=_data(where, cluster, "certificate-authority-data"),
            insecure=bool(cluster.value.get("insecure-skip-tls-verify")),
        )
        cert = _file(user, "client-certificate") or _data(where, user, "client-certificate-data")
        cert_key = _file(user, "client-key") or _data(where, user, "client-key-data")
        if (cert is None) != (cert_key is None):
            raise CredentialsError(
                f"{where}: user {chosen.user_name!r} has a client certificate without its key "
                "or a key without its certificate; give both"
            )
        if cert is not None and cert_key is not None:
            _load_client_cert(where, tls, cert, cert_key)
    name = cluster.value.get("tls-server-name")
    endpoint = Endpoint(host, port, tls, str(name) if name else None)
    return Settings(endpoint, token, where)


def _token(chosen: _Chosen, source: Source) -> Token:
    if chosen.user.value.get("token"):

        def from_kubeconfig() -> str | None:  # on a 401: the file may have been rewritten
            return str(_choose(source).user.value.get("token") or "") or None

        return Token(from_kubeconfig)
    token_file = _file(chosen.user, "tokenFile")
    if token_file is not None:
        return Token(token_file.read_text, TOKEN_FILE_PERIOD)
    return Token(lambda: None)


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CredentialsError(f"kubeconfig {path}: {exc.strerror}") from exc
    try:
        doc: Any = json.loads(text)
    except ValueError:
        from vgpu_operator import yamlsafe  # PyYAML: only for a kubeconfig written in YAML

        try:
            doc = yamlsafe.load(text)
        except ValueError as exc:
            raise CredentialsError(f"kubeconfig {path}: not YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise CredentialsError(f"kubeconfig {path}: not a kubeconfig (a mapping)")
    return doc


def _file(entry: _Entry, key: str) -> Path | None:
    value = entry.value.get(key)
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return path if path.is_absolute() else entry.base / path


def _data(where: str, entry: _Entry, key: str) -> bytes | None:
    value = entry.value.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CredentialsError(f"{where}: {key} is not base64: {exc}") from exc


def _tls(
    where: str,
    *,
    ca: Path | None = None,
    ca_data: bytes | None = None,
    insecure: bool = False,
) -> ssl.SSLContext:
    try:
        if insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif ca is not None or ca_data is not None:
            context = ssl.create_default_context(
                cafile=str(ca) if ca is not None else None,
                cadata=ca_data.decode() if ca_data is not None else None,
            )
        else:
            context = ssl.create_default_context()  # the system's CAs, as kubectl
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise CredentialsError(f"{where}: the cluster's CA: {exc}") from exc
    return context


def _load_client_cert(
    where: str, context: ssl.SSLContext, cert: Path | bytes, key: Path | bytes
) -> None:
    """ssl loads a certificate and key from files only: inline data goes through a private
    temporary file, removed at once (tempfile imported here: a pod's agent has no such data)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="vgpu-agent-") as scratch:
        paths = []
        for name, value in (("cert.pem", cert), ("key.pem", key)):
            if isinstance(value, Path):
                paths.append(str(value))
                continue
            path = Path(scratch) / name
            path.touch(mode=0o600)
            path.write_bytes(value)
            paths.append(str(path))
        try:
            context.load_cert_chain(paths[0], paths[1])
        except (OSError, ssl.SSLError) as exc:
            raise CredentialsError(f"{where}: the client certificate and key: {exc}") from exc


def _port(value: str, where: str) -> int:
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise CredentialsError(f"{where}: KUBERNETES_SERVICE_PORT {value!r} is not a port")
    return int(value)
