"""The CRDs of the GitOps tools the examples in `examples/gitops/` are written for, fetched from
those projects' Go modules with `go mod download -json` (as monitoring_tools.py fetches the
monitoring.coreos.com CRDs) and cached under `${XDG_CACHE_HOME:-~/.cache}/vgpu-operator/`:

- Argo CD's Application: github.com/argoproj/argo-cd/v3, `manifests/crds/application-crd.yaml`;
- Flux's HelmRelease: github.com/fluxcd/helm-controller,
  `config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml`;
- Flux's GitRepository and HelmRepository: github.com/fluxcd/source-controller,
  `config/crd/bases/source.toolkit.fluxcd.io_{gitrepositories,helmrepositories}.yaml`;
- Flux's Kustomization: github.com/fluxcd/kustomize-controller,
  `config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml`.

The versions are releases of one Flux line (2.7: helm-controller v1.4, source-controller v1.7,
kustomize-controller v1.7) and an Argo CD 3.1 release. The module proxy serves only some
versions of the Flux controllers' root modules (others answer 403); these ones it serves.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vgpu_devcluster.binaries import BuildError, Log, _go, _stderr_log, cache_root


@dataclass(frozen=True)
class CrdSource:
    """CRD files of one Go module at one version."""

    module: str
    version: str
    files: tuple[str, ...]  # paths inside the module

    @property
    def cache_dir(self) -> Path:
        return cache_root() / f"gitops-crds-{self.module.replace('/', '_')}-{self.version}"


ARGO_CD = CrdSource(
    "github.com/argoproj/argo-cd/v3", "v3.1.8", ("manifests/crds/application-crd.yaml",)
)
FLUX_HELM_CONTROLLER = CrdSource(
    "github.com/fluxcd/helm-controller",
    "v1.4.0",
    ("config/crd/bases/helm.toolkit.fluxcd.io_helmreleases.yaml",),
)
FLUX_SOURCE_CONTROLLER = CrdSource(
    "github.com/fluxcd/source-controller",
    "v1.7.0",
    (
        "config/crd/bases/source.toolkit.fluxcd.io_gitrepositories.yaml",
        "config/crd/bases/source.toolkit.fluxcd.io_helmrepositories.yaml",
    ),
)
FLUX_KUSTOMIZE_CONTROLLER = CrdSource(
    "github.com/fluxcd/kustomize-controller",
    "v1.7.3",
    ("config/crd/bases/kustomize.toolkit.fluxcd.io_kustomizations.yaml",),
)
SOURCES = (ARGO_CD, FLUX_HELM_CONTROLLER, FLUX_SOURCE_CONTROLLER, FLUX_KUSTOMIZE_CONTROLLER)


def ensure_source(source: CrdSource, log: Log = _stderr_log) -> list[Path]:
    """The CRD files of one module, copied into the cache on first use."""
    final = source.cache_dir
    paths = [final / Path(f).name for f in source.files]
    if all(p.is_file() for p in paths):
        return paths
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    package = f"{source.module}@{source.version}"
    log(f"fetching CRDs from {package} ...")
    proc = subprocess.run(
        [_go(), "mod", "download", "-json", package],
        cwd=tmp,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=False,
    )
    info = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    if proc.returncode != 0 or "Dir" not in info:
        raise BuildError(
            f"go mod download {package}: {info.get('Error') or proc.stderr or proc.stdout}"
        )
    module_dir = Path(info["Dir"])
    for f in source.files:
        if not (module_dir / f).is_file():
            raise BuildError(f"{f} not found in {package} ({module_dir})")
        shutil.copyfile(module_dir / f, tmp / Path(f).name)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return paths


def ensure_gitops_crds(log: Log = _stderr_log) -> list[Path]:
    """Every CRD the GitOps examples need (Argo CD's Application; Flux's HelmRelease,
    GitRepository, HelmRepository and Kustomization), fetched on first use."""
    return [p for source in SOURCES for p in ensure_source(source, log)]
