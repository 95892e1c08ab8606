"""Build and cache the control-plane binaries from Go modules.

kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come from `k8s.io/kubernetes`
through the small wrapper module in `hack/controlplane/` (k8s.io/kubernetes cannot be
`go install`ed: its go.mod replaces the staging modules with local paths); etcd from
`go.etcd.io/etcd/server/v3` in the same module; kwok and helm by `go install module@version`.

Binaries are cached outside the checkout, keyed by version, in
`${XDG_CACHE_HOME:-~/.cache}/vgpu-operator/<tool>-<version>/<tool>` (CI clones afresh, so a cache in
the repo would never be warm); a tool built with link flags of its own (`extra_ldflags`) has a
digest of them in that name too, so changing them builds it again. `KUBEBUILDER_ASSETS` (the
envtest convention: a directory holding `kube-apiserver` and `etcd`) skips building those two.

helm is linked as helm's own release builds are (its Makefile's LDFLAGS): its version, and the
Kubernetes version `helm lint` and `helm template` assume without `--kube-version`, which a
`go install` leaves at v1.20 (helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor/Minor, and the same
in pkg/lint/rules for the deprecation checks). Here that is the local control plane's version,
so the chart's `kubeVersion` constraint holds for `helm lint --strict` and `helm template`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.5"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"

_VERSION_LDFLAGS = (
    f"-X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION} "
    "-X k8s.io/component-base/version.gitMajor=1 "
    f"-X k8s.io/component-base/version.gitMinor={KUBERNETES_VERSION.split('.')[1]}"
)

# helm's release LDFLAGS (helm.sh/helm/v3@v3.22.0:Makefile): the default Kubernetes version of
# `helm template`/`helm lint` (Capabilities.KubeVersion) and of the lint deprecation rules.
_K8S_MINOR = KUBERNETES_VERSION.split(".")[1]
HELM_LDFLAGS = " ".join(
    f"-X helm.sh/helm/v3/{var}"
    for var in (
        f"internal/version.version={HELM_VERSION}",
        "pkg/lint/rules.k8sVersionMajor=1",
        f"pkg/lint/rules.k8sVersionMinor={_K8S_MINOR}",
        "pkg/chartutil.k8sVersionMajor=1",
        f"pkg/chartutil.k8sVersionMinor={_K8S_MINOR}",
    )
)

Log = Callable[[str], None]


@dataclass(frozen=True)
class Tool:
    name: str
    version: str
    package: str  # a package of the wrapper module, or module@version for `go install`
    extra_ldflags: str = ""
    in_wrapper_module: bool = True


TOOLS: tuple[Tool, ...] = (
    Tool("kube-apiserver", KUBERNETES_VERSION, "k8s.io/kubernetes/cmd/kube-apiserver"),
    Tool("etcd", ETCD_VERSION, "go.etcd.io/etcd/server/v3"),
    Tool(
        "kube-controller-manager",
        KUBERNETES_VERSION,
        "k8s.io/kubernetes/cmd/kube-controller-manager",
    ),
    Tool("kube-scheduler", KUBERNETES_VERSION, "k8s.io/kubernetes/cmd/kube-scheduler"),
    Tool(
        "kubectl",
        KUBERNETES_VERSION,
        "k8s.io/kubernetes/cmd/kubectl",
        extra_ldflags=f"-X k8s.io/client-go/pkg/version.gitVersion={KUBERNETES_VERSION}",
    ),
    Tool(
        "kwok", KWOK_VERSION, f"sigs.k8s.io/kwok/cmd/kwok@{KWOK_VERSION}", in_wrapper_module=False
    ),
    Tool(
        "helm",
        HELM_VERSION,
        f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}",
        extra_ldflags=HELM_LDFLAGS,
        in_wrapper_module=False,
    ),
)
TOOL_BY_NAME = {t.name: t for t in TOOLS}

# kwok needs Stage objects; they ship inside its module.
KWOK_STAGE_GLOBS = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-*.yaml",
)


class BuildError(RuntimeError):
    pass


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vgpu-operator"


def repo_root() -> Path:
    """The source checkout this package runs from (the wrapper Go module lives there)."""
    return Path(__file__).resolve().parents[2]


def wrapper_module_dir() -> Path:
    d = repo_root() / "hack" / "controlplane"
    if not (d / "go.mod").is_file():
        raise BuildError(
            f"{d}/go.mod not found: building the control plane needs a source checkout of "
            "vgpu-operator (or set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd)"
        )
    return d


def tool_dir(tool: Tool) -> Path:
    """`<tool>-<version>`, and `-<digest of its own link flags>` when it has any."""
    key = f"{tool.name}-{tool.version}"
    if tool.extra_ldflags:
        key += "-" + hashlib.sha256(tool.extra_ldflags.encode()).hexdigest()[:12]
    return cache_root() / key


def _assets_override(name: str) -> Path | None:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets and name in ("kube-apiserver", "etcd"):
        p = Path(assets) / name
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise BuildError(f"KUBEBUILDER_ASSETS={assets} has no executable {name}")
        return p
    return None


def _stderr_log(msg: str) -> None:
    print(f"[vgpu-dev cluster] {msg}", file=sys.stderr, flush=True)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "the Go toolchain (go >= 1.26) is needed to build the local control plane; "
            "install it or set KUBEBUILDER_ASSETS / VGPU_TEST_KUBECONFIG"
        )
    return go


def _run(
    cmd: list[str], cwd: Path, env: dict[str, str], log: Log = _stderr_log, what: str = ""
) -> None:
    """Run a build step, saying every minute that it is still going."""
    start = time.monotonic()
    with subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        while True:
            try:
                _, stderr = proc.communicate(timeout=60)
                break
            except subprocess.TimeoutExpired:
                minutes = (time.monotonic() - start) / 60
                log(f"  still building {what or cmd[-1]} ({minutes:.0f} min so far)")
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-4000:]}")


def _build(tool: Tool, log: Log) -> Path:
    final = tool_dir(tool)
    tmp = final.with_name(final.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    env = dict(os.environ)
    ldflags = f"-s -w {_VERSION_LDFLAGS} {tool.extra_ldflags}".strip()
    start = time.monotonic()
    log(f"building {tool.name} {tool.version} (first time only; a cold build takes minutes) ...")
    if tool.in_wrapper_module:
        _run(
            [
                _go(),
                "build",
                "-trimpath",
                "-ldflags",
                ldflags,
                "-o",
                str(tmp / tool.name),
                tool.package,
            ],
            cwd=wrapper_module_dir(),
            env=env,
            log=log,
            what=tool.name,
        )
    else:
        env["GOBIN"] = str(tmp)
        env["GOFLAGS"] = "-mod=mod"
        ldflags_own = f"-s -w {tool.extra_ldflags}".strip()
        _run(
            [_go(), "install", "-trimpath", "-ldflags", ldflags_own, tool.package],
            cwd=tmp,
            env=env,
            log=log,
            what=tool.name,
        )
    if tool.name == "kwok":
        _write_kwok_stages(tmp, env)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    log(f"built {tool.name} {tool.version} in {time.monotonic() - start:.0f}s -> {final}")
    return final / tool.name


def _write_kwok_stages(dest: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(
        [_go(), "mod", "download", "-json", f"sigs.k8s.io/kwok@{KWOK_VERSION}"],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(f"go mod download sigs.k8s.io/kwok@{KWOK_VERSION}: {proc.stderr}")
    module_dir = Path(json.loads(proc.stdout)["Dir"])
    files = [f for pattern in KWOK_STAGE_GLOBS for f in sorted(module_dir.glob(pattern))]
    if len(files) < len(KWOK_STAGE_GLOBS):
        raise BuildError(f"kwok stage files missing under {module_dir}/kustomize/stage")
    parts = [f.read_text() for f in files]
    (dest / "stages.yaml").write_text("\n---\n".join(p.strip() for p in parts) + "\n")


def ensure(name: str, log: Log = _stderr_log) -> Path:
    """Path of a working binary, building it into the cache on first use."""
    override = _assets_override(name)
    if override is not None:
        return override
    tool = TOOL_BY_NAME[name]
    path = tool_dir(tool) / tool.name
    if path.is_file() and os.access(path, os.X_OK):
        if tool.name == "kwok" and not kwok_stages().is_file():
            _write_kwok_stages(tool_dir(tool), dict(os.environ))
        return path
    return _build(tool, log)


def kwok_stages() -> Path:
    return tool_dir(TOOL_BY_NAME["kwok"]) / "stages.yaml"


def ensure_all(log: Log = _stderr_log, names: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Build every missing tool, printing what is built and how long it took."""
    wanted = names or tuple(t.name for t in TOOLS)
    start = time.monotonic()
    missing = [
        n
        for n in wanted
        if _assets_override(n) is None and not (tool_dir(TOOL_BY_NAME[n]) / n).is_file()
    ]
    if missing:
        log(f"control-plane binaries to build: {', '.join(missing)} (cache: {cache_root()})")
    paths = {n: ensure(n, log) for n in wanted}
    if missing:
        log(f"control plane ready after {time.monotonic() - start:.0f}s of building")
    return paths
