"""Kubeconfig files in every form kubectl accepts, for the local control plane.

The fields are those of the kubeconfig reference
(https://kubernetes.io/docs/reference/config-api/kubeconfig.v1/): the cluster's CA as a file
(`certificate-authority`) or inline (`certificate-authority-data`); the user as `token`,
`tokenFile`, client certificate and key as files or inline, or an `exec` credential plugin
(https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-credential-plugins);
and one configuration split over several files (`KUBECONFIG=a:b`), merged by name.

Files are written as JSON, which is YAML: no dependency needed.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXEC_API_VERSION = "client.authentication.k8s.io/v1"

# An exec credential plugin: prints an ExecCredential carrying the token that is in the file
# named by its first argument at the time it runs (so a test can rotate the token).
EXEC_PLUGIN = f"""\
#!/bin/sh
set -e
token=$(cat "$1")
printf '{{"apiVersion":"{EXEC_API_VERSION}","kind":"ExecCredential","status":{{"token":"%s"}}}}' \\
  "$token"
"""


def cluster_entry(server: str, ca_file: Path | None, *, inline: bool = False) -> dict[str, Any]:
    """A cluster: the CA as a path, inline (`inline=True`), or no verification (no CA)."""
    if ca_file is None:
        return {"server": server, "insecure-skip-tls-verify": True}
    if inline:
        return {"server": server, "certificate-authority-data": _b64(ca_file)}
    return {"server": server, "certificate-authority": str(ca_file)}


def token_user(token: str) -> dict[str, Any]:
    return {"token": token}


def token_file_user(path: Path) -> dict[str, Any]:
    return {"tokenFile": str(path)}


def cert_files_user(cert: Path, key: Path) -> dict[str, Any]:
    return {"client-certificate": str(cert), "client-key": str(key)}


def cert_data_user(cert: Path, key: Path) -> dict[str, Any]:
    return {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}


def exec_user(command: Path, *args: str) -> dict[str, Any]:
    return {
        "exec": {
            "apiVersion": EXEC_API_VERSION,
            "command": str(command),
            "args": list(args),
            "interactiveMode": "Never",  # required by kubectl for the v1 API
            "provideClusterInfo": False,
        }
    }


def write_exec_plugin(path: Path) -> Path:
    """The plugin script of EXEC_PLUGIN, executable; its argument is the token's file."""
    path.write_text(EXEC_PLUGIN)
    path.chmod(0o755)
    return path


def config(
    cluster: dict[str, Any], user: dict[str, Any], *, name: str = "local", context: str = "local"
) -> dict[str, Any]:
    """One cluster, one user and a context joining them (the current one)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": name, "user": name}}],
        "current-context": context,
    }


def write(path: Path, content: dict[str, Any]) -> Path:
    path.write_text(json.dumps(content, indent=2))
    path.chmod(0o600)
    return path


def write_kubeconfig(path: Path, server: str, token: str, ca_file: Path | None, user: str) -> Path:
    """A kubeconfig with a bearer token, its user and context named `user`."""
    return write(
        path, config(cluster_entry(server, ca_file), token_user(token), name=user, context=user)
    )


@dataclass(frozen=True)
class Kubeconfig:
    """What a client is given: one kubeconfig file as `--kubeconfig`, or several files as
    `KUBECONFIG=a:b` (kubectl's `--kubeconfig` takes a single path), and `--context` (None:
    the current context)."""

    form: str
    paths: tuple[str, ...]
    context: str | None = None

    @property
    def path(self) -> str:
        """The file, or the files joined as in $KUBECONFIG."""
        return os.pathsep.join(self.paths)

    def args(self) -> list[str]:
        """The command-line flags for this kubeconfig."""
        flags = ["--kubeconfig", self.paths[0]] if len(self.paths) == 1 else []
        return flags + (["--context", self.context] if self.context else [])

    def env(self) -> dict[str, str]:
        """The environment for this kubeconfig (KUBECONFIG for several files)."""
        return {"KUBECONFIG": self.path} if len(self.paths) > 1 else {}


def write_split(
    directory: Path, cluster: dict[str, Any], user: dict[str, Any], *, context: str
) -> Kubeconfig:
    """One configuration over two files: the cluster in the first; users and contexts in the
    second, whose current context is a decoy (a cluster no file defines), so only `context`
    works."""
    first = write(
        directory / "split-clusters",
        {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "split", "cluster": cluster}]},
    )
    second = write(
        directory / "split-users",
        {
            "apiVersion": "v1",
            "kind": "Config",
            "users": [{"name": "split-user", "user": user}],
            "contexts": [
                {"name": "decoy", "context": {"cluster": "nowhere", "user": "split-user"}},
                {"name": context, "context": {"cluster": "split", "user": "split-user"}},
            ],
            "current-context": "decoy",
        },
    )
    return Kubeconfig("split-files", (str(first), str(second)), context)


@dataclass(frozen=True)
class Identity:
    """Where the local apiserver is, and an admin identity in each shape: a token (also in a
    file) and a client certificate and key."""

    server: str
    ca_file: Path
    token: str
    token_file: Path
    client_cert: Path
    client_key: Path


FORMS = (
    "ca-file-token",
    "ca-data-token",
    "token-file",
    "cert-files",
    "cert-data",
    "exec-plugin",
    "split-files",
)


def write_forms(directory: Path, who: Identity) -> dict[str, Kubeconfig]:
    """A kubeconfig of every form in FORMS, in `directory`. The exec plugin prints the token
    in `who.token_file` (as `token-file` reads it)."""
    directory.mkdir(parents=True, exist_ok=True)
    by_file = cluster_entry(who.server, who.ca_file)
    inline = cluster_entry(who.server, who.ca_file, inline=True)
    plugin = write_exec_plugin(directory / "exec-plugin.sh")
    users = {
        "ca-file-token": (by_file, token_user(who.token)),
        "ca-data-token": (inline, token_user(who.token)),
        "token-file": (by_file, token_file_user(who.token_file)),
        "cert-files": (by_file, cert_files_user(who.client_cert, who.client_key)),
        "cert-data": (inline, cert_data_user(who.client_cert, who.client_key)),
        "exec-plugin": (inline, exec_user(plugin, str(who.token_file))),
    }
    forms = {
        form: Kubeconfig(form, (str(write(directory / f"kubeconfig-{form}", config(c, u))),))
        for form, (c, u) in users.items()
    }
    forms["split-files"] = write_split(directory, by_file, token_user(who.token), context="chosen")
    assert set(forms) == set(FORMS)
    return forms


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
