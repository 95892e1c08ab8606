#!/usr/bin/env bash
# The container image's build steps, for the Makefile (`make image`, `make image-base`,
# `make image-test-prereqs`, `make release`) and .ci/run. docs/install-image.md explains them.
#
#   image.sh engine                 the engine `make image` uses: docker, podman or buildah
#   image.sh install                podman, buildah, runc and mmdebstrap from Debian's packages
#                                   (root, apt-get; does nothing when an engine is present)
#   image.sh base                   the base image made from Debian's packages (mmdebstrap;
#                                   the tarball is cached), imported; prints its name
#   image.sh build IMAGE [BASE]     build the Dockerfile as IMAGE (on BASE when given: the
#                                   Dockerfile's PYTHON_IMAGE)
#   image.sh run ARGS...            `<engine> run ARGS...` with the engine's settings here
#   image.sh env                    ENGINE=... and CONTAINERS_CONF=... (for the tests)
#   image.sh save IMAGE FILE        the image as an OCI archive (air-gapped transfer)
#
# Environment: CONTAINER_ENGINE (a path or name; default: the first of docker, podman, buildah),
# CA_BUNDLE (a PEM bundle mounted as a build secret for a TLS-inspecting proxy; empty: none),
# PIP_INDEX_URL (a PyPI mirror for the build), IMAGE_BUILD_FLAGS (more `build` flags),
# DEBIAN_MIRROR / DEBIAN_SECURITY_MIRROR (the base's package sources).
#
# podman and buildah get a containers.conf of ours (unless CONTAINERS_CONF names one): runc as
# the runtime (crun refuses a host with both cgroup v1 and v2 hierarchies mounted, as some CI
# machines have) and default ulimits no higher than this shell's hard limits (podman's defaults,
# nofile 1048576, fail where the host's are lower).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/vgpu-operator/image
say() { echo "[image] $*" >&2; }

# --- the engine ---------------------------------------------------------------------------------

engine() {
  local e=${CONTAINER_ENGINE:-}
  if [ -z "$e" ]; then
    # docker only with a daemon to talk to (a docker CLI alone builds nothing)
    for candidate in docker podman buildah; do
      command -v "$candidate" >/dev/null 2>&1 || continue
      if [ "$candidate" = docker ] && ! timeout 20 docker info >/dev/null 2>&1; then continue; fi
      e=$candidate
      break
    done
  fi
  if [ -z "$e" ] || ! command -v "$e" >/dev/null 2>&1; then
    say "no container engine (docker, podman or buildah) found${e:+: $e}."
    say "On Debian/Ubuntu, as root: hack/image/image.sh install (podman, buildah, runc, mmdebstrap)."
    say "To run the tests without the image test: VGPU_SKIP_IMAGE_TESTS=1 make test"
    return 1
  fi
  command -v "$e"
}

engine_kind() { basename "$1"; }

containers_conf() {
  # podman/buildah only; a containers.conf the user names is theirs.
  if [ -n "${CONTAINERS_CONF:-}" ]; then return; fi
  local hard_n hard_u nofile nproc conf
  hard_n=$(ulimit -Hn); hard_u=$(ulimit -Hu)
  nofile=65536; nproc=16384
  if [ "$hard_n" != unlimited ] && [ "$hard_n" -lt "$nofile" ]; then nofile=$hard_n; fi
  if [ "$hard_u" != unlimited ] && [ "$hard_u" -lt "$nproc" ]; then nproc=$hard_u; fi
  mkdir -p "$CACHE"
  conf=$CACHE/containers-$nofile-$nproc.conf
  {
    echo "# written by hack/image/image.sh"
    echo "[containers]"
    echo "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]"
    if command -v runc >/dev/null 2>&1; then
      echo "[engine]"
      echo "runtime = \"runc\""
    fi
  } >"$conf.tmp$$"
  mv "$conf.tmp$$" "$conf"
  export CONTAINERS_CONF=$conf
}

with_engine() {
  local e
  e=$(engine)
  case $(engine_kind "$e") in
    podman | buildah) containers_conf ;;
    docker) export DOCKER_BUILDKIT=1 ;;
  esac
  ENGINE=$e
}

image_exists() {
  case $(engine_kind "$ENGINE") in
    docker) "$ENGINE" image inspect "$1" >/dev/null 2>&1 ;;
    podman) "$ENGINE" image exists "$1" ;;
    buildah) "$ENGINE" inspect --type image "$1" >/dev/null 2>&1 ;;
  esac
}

# --- install ------------------------------------------------------------------------------------

cmd_install() {
  local missing=()
  for tool in podman buildah runc mmdebstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  if [ ${#missing[@]} -eq 0 ]; then say "podman, buildah, runc and mmdebstrap are installed"; return; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "missing: ${missing[*]}; install them from your distribution's packages"
    say "(Debian 12: apt-get install --no-install-recommends podman buildah runc mmdebstrap uidmap)"
    return 1
  fi
  say "installing ${missing[*]} from Debian's packages"
  local start=$SECONDS
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    podman buildah runc mmdebstrap uidmap >/dev/null
  say "installed in $((SECONDS - start))s"
}

# --- the base from Debian's packages -------------------------------------------------------------

# What runs: Python 3.11 with its standard library (venv included: the build stage makes the
# virtualenv with it), the CA certificates, and the C++ runtime grpcio's wheel links against
# (the agent's kubelet PodResources call; the official Python slim image has it through apt).
# No pip, no setuptools, no apt (mmdebstrap's `essential` variant); merged /usr; no
# documentation but the copyright files.
BASE_SUITE=bookworm
BASE_PACKAGES=python3,ca-certificates,libstdc++6
BASE_OPTIONS=(
  --variant=essential
  --include="$BASE_PACKAGES"
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
)
BASE_ENV=(
  'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  'ENV LANG=C.UTF-8'
  'CMD ["python3"]'
)

cmd_base() {
  with_engine
  local mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
  local security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
  local sources=(
    "deb $mirror $BASE_SUITE main"
    "deb $mirror $BASE_SUITE-updates main"
    "deb $security $BASE_SUITE-security main"
  )
  # The cache key: the recipe (not the mirrors: the same packages come from any of them).
  local key
  key=$(printf '%s\n' "$BASE_SUITE" "${BASE_OPTIONS[@]}" "${BASE_ENV[@]}" | sha256sum | cut -c1-12)
  local name=localhost/vgpu-operator-base:$BASE_SUITE-$key
  local tarball=$CACHE/debian-$BASE_SUITE-$key.tar
  if [ -n "${REFRESH_BASE:-}" ]; then rm -f "$tarball"; fi
  if [ -z "${REFRESH_BASE:-}" ] && image_exists "$name"; then echo "$name"; return; fi
  if [ ! -s "$tarball" ]; then
    command -v mmdebstrap >/dev/null 2>&1 || { say "mmdebstrap is needed: hack/image/image.sh install"; return 1; }
    say "making the base from Debian's packages ($BASE_SUITE: $BASE_PACKAGES) with mmdebstrap"
    local start=$SECONDS tmp=$CACHE/tmp$$-debian.tar  # mmdebstrap: .tar names a tarball
    mkdir -p "$CACHE"
    if ! mmdebstrap "${BASE_OPTIONS[@]}" "$BASE_SUITE" "$tmp" "${sources[@]}" >"$CACHE/mmdebstrap.log" 2>&1; then
      tail -30 "$CACHE/mmdebstrap.log" >&2
      rm -rf "$tmp"
      say "mmdebstrap failed (log: $CACHE/mmdebstrap.log)"
      return 1
    fi
    mv "$tmp" "$tarball"
    say "base made in $((SECONDS - start))s ($(($(stat -c %s "$tarball") / 1000000)) MB): $tarball"
  fi
  local changes=()
  for c in "${BASE_ENV[@]}"; do changes+=(--change "$c"); done
  case $(engine_kind "$ENGINE") in
    buildah)  # buildah has no import: a container from scratch with the tree copied in
      local ctr
      ctr=$(buildah from scratch)
      buildah add "$ctr" "$tarball" / >/dev/null
      buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd python3 "$ctr"
      buildah commit --quiet --rm "$ctr" "$name" >/dev/null
      ;;
    *) "$ENGINE" import "${changes[@]}" "$tarball" "$name" >/dev/null ;;
  esac
  say "imported $name"
  echo "$name"
}

# --- build, run, save ---------------------------------------------------------------------------

cmd_build() {
  local image=$1 base=${2:-}
  with_engine
  local args=(build -t "$image" -f "$ROOT/Dockerfile")
  if [ -n "$base" ]; then args+=(--build-arg "PYTHON_IMAGE=$base"); fi
  args+=(--build-arg "VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")")
  if [ -n "${PIP_INDEX_URL:-}" ]; then args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"); fi
  if [ -n "${CA_BUNDLE:-}" ]; then
    [ -s "$CA_BUNDLE" ] || { say "CA_BUNDLE=$CA_BUNDLE: no such file"; return 1; }
    args+=(--secret "id=ca-bundle,src=$CA_BUNDLE")
  fi
  # shellcheck disable=SC2206  # IMAGE_BUILD_FLAGS is split on purpose
  args+=(${IMAGE_BUILD_FLAGS:-} "$ROOT")
  say "$(engine_kind "$ENGINE") ${args[*]}"
  local start=$SECONDS
  "$ENGINE" "${args[@]}" >&2
  say "built $image in $((SECONDS - start))s"
}

cmd_run() {
  with_engine
  exec "$ENGINE" run "$@"
}

cmd_env() {
  with_engine
  echo "ENGINE=$ENGINE"
  echo "CONTAINERS_CONF=${CONTAINERS_CONF:-}"
}

cmd_save() {
  with_engine
  case $(engine_kind "$ENGINE") in
    docker) "$ENGINE" save -o "$2" "$1" ;;
    buildah) "$ENGINE" push "$1" "oci-archive:$2" ;;
    *) "$ENGINE" save --format oci-archive -o "$2" "$1" ;;
  esac
}

case ${1:-} in
  engine) engine ;;
  install) cmd_install ;;
  base) cmd_base ;;
  build) shift; cmd_build "$@" ;;
  run) shift; cmd_run "$@" ;;
  env) cmd_env ;;
  save) shift; cmd_save "$@" ;;
  *) sed -n '2,21p' "$0" >&2; exit 2 ;;
esac
