# syntax=docker/dockerfile:1
# The vgpu-operator image: the controller (`run`), the node agent (`agent`), `doctor` and the
# uninstall hook (`cleanup`), one console script as the entrypoint; the chart passes the
# subcommand as the container's args. Build it with `make image` (needs docker or podman).
#
# The base image comes in through a build ARG. To pin it by digest (reproducible builds; no
# registry is reachable where this repository is tested, so the default is a tag):
#   docker buildx imagetools inspect docker.io/library/python:3.11-slim-bookworm
#   make image PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm@sha256:<digest printed>
# Both stages use the same base, so the virtualenv copied from the first runs in the second.
ARG PYTHON_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# Only the operator's distribution: devtools/ (the local control plane, the fake nvidia-smi,
# the simulated plugin, the demo) is not in the build context at all (.dockerignore).
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m pip wheel --no-cache-dir --no-deps . -w /wheels \
 && python -m venv /opt/vgpu-operator \
 && /opt/vgpu-operator/bin/pip install --no-cache-dir /wheels/vgpu_operator-*.whl \
 && /opt/vgpu-operator/bin/python -m compileall -q /opt/vgpu-operator/lib \
 && /opt/vgpu-operator/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
# A numeric non-root user (Kubernetes checks runAsNonRoot against a number, not a name); the
# chart's podSecurityContext.runAsUser says the same. The agent's DaemonSet runs it as root,
# privileged, for nvidia-smi's MIG commands (see the chart).
ARG UID=65532
COPY --from=build /opt/vgpu-operator /opt/vgpu-operator
ENV PATH=/opt/vgpu-operator/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER ${UID}:${UID}
ENTRYPOINT ["vgpu-operator"]
CMD ["--help"]
