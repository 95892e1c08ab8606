# vgpu-operator: every set-up step a fresh machine needs, then the checks.
#   make test   - the whole suite: lint, mypy --strict, unit and cluster tests (README's test command)
#   make demo   - the local demo on a real apiserver with simulated GPU nodes
#   make unit   - the tests that need no cluster
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: setup controlplane lint unit cluster-tests test demo crds bench clean check-leftovers image

$(STAMP): pyproject.toml devtools/pyproject.toml
	@echo "==> creating $(VENV) with $(PYTHON) and installing vgpu-operator[dev] and its local-cluster tools (devtools/)"
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is required"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./devtools
	@touch $@

setup: $(STAMP)

# Builds (once; cached in ~/.cache/vgpu-operator) etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok and helm from Go modules. KUBEBUILDER_ASSETS skips apiserver+etcd.
controlplane: setup
	@if [ -n "$$VGPU_TEST_KUBECONFIG" ]; then echo "==> using the cluster in VGPU_TEST_KUBECONFIG"; \
	else time $(BIN)/vgpu-dev cluster build; fi

lint: setup
	$(BIN)/ruff check operator devtools tests bench
	$(BIN)/ruff format --check operator devtools tests bench
	$(BIN)/mypy --strict operator/vgpu_operator devtools/vgpu_devcluster

unit: setup
	$(BIN)/pytest -m "not cluster" -q $(PYTEST_ARGS)

# The generated-spec property test runs 10,000 examples here (2,000 in `make unit`).
test: setup controlplane lint
	PROPERTY_EXAMPLES=10000 $(BIN)/pytest -q $(PYTEST_ARGS)
	@$(MAKE) --no-print-directory check-leftovers

# No control-plane process of the test session may outlive it.
# ([v] keeps pgrep from matching this very shell command line.)
check-leftovers:
	@if pgrep -af '[v]gpu-testcluster-' >/dev/null; then \
	  echo "control-plane processes left running after the tests:"; pgrep -af '[v]gpu-testcluster-'; exit 1; \
	else echo "==> no control-plane process left running"; fi

demo: setup controlplane
	$(BIN)/vgpu-dev demo

crds: setup
	$(BIN)/vgpu-operator crds -o crds
	$(BIN)/vgpu-operator crds -o charts/vgpu-operator/crds

bench: setup controlplane
	$(BIN)/python bench/convergence.py

# The container image (Dockerfile), on machines with docker or podman; none is needed, or
# present, for anything else here (the tests check the Dockerfile's contract instead).
# PYTHON_IMAGE=<base>@sha256:... pins the base image by digest.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= ghcr.io/vgpu-operator/vgpu-operator:$(VERSION)
CONTAINER_ENGINE ?= $(shell command -v docker || command -v podman)
image:
	@if [ -z "$(CONTAINER_ENGINE)" ]; then \
	  echo "make image needs a container engine (docker or podman); none found"; exit 1; fi
	$(CONTAINER_ENGINE) build -t $(IMAGE) $(if $(PYTHON_IMAGE),--build-arg PYTHON_IMAGE=$(PYTHON_IMAGE)) .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
