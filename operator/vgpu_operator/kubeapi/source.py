"""Where a process's credentials come from, decided once for both API clients (the controller's
`kubeapi.credentials` and the node agent's `kubeapi.lite.config`); standard library only.

controller-runtime's order: `--kubeconfig` (one path, or several separated by ':' as in
$KUBECONFIG), then $KUBECONFIG, then the in-cluster ServiceAccount (when the token file and
`KUBERNETES_SERVICE_HOST` are there), then `~/.kube/config`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

# The ServiceAccount directory a pod gets; VGPU_SERVICEACCOUNT_DIR points elsewhere (tests).
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
ENV_SA_DIR = "VGPU_SERVICEACCOUNT_DIR"
TOKEN_FILE_PERIOD = 60.0  # seconds between reads of a token file (client-go: one minute)


class CredentialsError(RuntimeError):
    """No usable credentials: says where it looked and what was missing."""


@dataclass(frozen=True)
class Source:
    """A kubeconfig (and context), or the in-cluster ServiceAccount."""

    kubeconfig: str | None = None  # path(s), ':'-separated; None: in-cluster
    context: str | None = None
    sa_dir: Path = SA_DIR
    environ: dict[str, str] = field(default_factory=dict)  # KUBERNETES_SERVICE_HOST/PORT

    @property
    def in_cluster(self) -> bool:
        return self.kubeconfig is None

    def describe(self) -> str:
        if self.in_cluster:
            return f"in-cluster ServiceAccount ({self.sa_dir})"
        ctx = f", context {self.context}" if self.context else ""
        return f"kubeconfig {self.kubeconfig}{ctx}"


def resolve(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    environ: dict[str, str] | None = None,
) -> Source:
    """Which credentials to use, in controller-runtime's order (see the module docstring)."""
    env = dict(os.environ if environ is None else environ)
    sa_dir = Path(env.get(ENV_SA_DIR) or SA_DIR)
    names = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    service: dict[str, str] = {k: env[k] for k in names if k in env}
    if kubeconfig:
        return Source(kubeconfig=kubeconfig, context=context)
    if env.get("KUBECONFIG"):
        return Source(kubeconfig=env["KUBECONFIG"], context=context)
    if (sa_dir / "token").exists() and service.get("KUBERNETES_SERVICE_HOST"):
        return Source(kubeconfig=None, sa_dir=sa_dir, environ=service)
    default = Path(env.get("HOME") or Path.home()) / ".kube" / "config"
    if default.exists():
        return Source(kubeconfig=str(default), context=context)
    raise CredentialsError(
        "no credentials: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or run in a "
        f"pod with a ServiceAccount token ({sa_dir}/token) and KUBERNETES_SERVICE_HOST"
    )


def service_env(environ: dict[str, str]) -> tuple[str, str]:
    """The in-cluster apiserver's host and port (the pod's KUBERNETES_SERVICE_HOST/PORT)."""
    host = environ.get("KUBERNETES_SERVICE_HOST") or ""
    port = environ.get("KUBERNETES_SERVICE_PORT") or "443"
    if not host:
        raise CredentialsError("in-cluster: KUBERNETES_SERVICE_HOST is not set")
    return host, port


def any_exists(paths: str) -> bool:
    """Whether any of the ':'-separated kubeconfig paths exists."""
    return any(Path(x).expanduser().exists() for x in paths.split(os.pathsep) if x)
