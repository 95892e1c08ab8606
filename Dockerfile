# The vgpu-operator image: the controller (`run`), the node agent (`agent`), `doctor` and the
# uninstall hook (`cleanup`), one console script as the entrypoint; the chart passes the
# subcommand as the container's args. Build it with `make image` (docker, podman or buildah);
# docs/install-image.md has the size, the build time, proxied and air-gapped builds.
#
# The base image comes in through a build ARG; both stages use it, so the virtualenv copied from
# the first runs on the same Python in the second. The default is the official Python slim image
# pinned by its index digest (docker-library/repo-info, repos/python/remote/3.11-slim-bookworm.md:
# Python 3.11.16 on bookworm). To move it to a newer build:
#   docker buildx imagetools inspect docker.io/library/python:3.11-slim-bookworm
#   make image PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm@sha256:<digest printed>
# Any base with a `python3` (3.11+) and its standard library (venv included) works: CI builds on
# one made from Debian's python3 package (`make image-base`), which carries no pip at all.
ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

FROM ${PYTHON_IMAGE} AS build
# pip for this stage only, pinned and checked (hack/image/bootstrap_pip.py): the base needs none.
ARG PIP_VERSION=26.3
ARG PIP_SHA256=f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13
# An internal mirror of PyPI (air-gapped builds); empty: PyPI.
ARG PIP_INDEX_URL=
WORKDIR /src
# Only the operator's distribution: devtools/ (the local control plane, the fake nvidia-smi,
# the simulated plugin, the demo) is not in the build context at all (.dockerignore).
COPY hack/image/bootstrap_pip.py /usr/local/share/vgpu-build/
COPY pyproject.toml README.md LICENSE ./
COPY operator ./operator
# A TLS-inspecting proxy's CA bundle comes in as a build secret (`make image CA_BUNDLE=...`):
# mounted for this step only, never written to a layer.
RUN --mount=type=secret,id=ca-bundle \
    set -eu; \
    if [ -s /run/secrets/ca-bundle ]; then \
      export SSL_CERT_FILE=/run/secrets/ca-bundle PIP_CERT=/run/secrets/ca-bundle; \
    fi; \
    if [ -z "$PIP_INDEX_URL" ]; then unset PIP_INDEX_URL; fi; \
    pip_wheel="$(python3 /usr/local/share/vgpu-build/bootstrap_pip.py \
      "$PIP_VERSION" "$PIP_SHA256" /tmp)"; \
    python3 -m venv --without-pip /opt/vgpu-operator; \
    PYTHONPATH="$pip_wheel" /opt/vgpu-operator/bin/python -m pip install \
      --no-cache-dir --no-compile --disable-pip-version-check --no-warn-script-location /src; \
    /opt/vgpu-operator/bin/python -m compileall -q /opt/vgpu-operator/lib; \
    rm -f "$pip_wheel"

FROM ${PYTHON_IMAGE}
# A numeric non-root user (Kubernetes checks runAsNonRoot against a number, not a name); the
# chart's podSecurityContext.runAsUser says the same. The agent's DaemonSet runs it as root,
# privileged, for nvidia-smi's MIG commands (see the chart).
ARG UID=65532
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="vgpu-operator" \
      org.opencontainers.image.description="Declarative, consistency-checked GPU virtualization for Volcano" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/vgpu-operator/vgpu-operator"
# The virtualenv only: the operator, its dependencies, their bytecode; no pip, no setuptools.
COPY --from=build /opt/vgpu-operator /opt/vgpu-operator
ENV PATH=/opt/vgpu-operator/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER ${UID}:${UID}
ENTRYPOINT ["vgpu-operator"]
CMD ["--help"]
