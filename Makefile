# vgpu-operator: every set-up step a fresh machine needs, then the checks.
#   make test   - the whole suite: lint, mypy --strict, unit and cluster tests (README's test command)
#   make demo   - the local demo on a real apiserver with simulated GPU nodes
#   make unit   - the tests that need no cluster
#   make image, make release - the container image, the release artifacts (hack/release.mk)
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: setup controlplane lint unit cluster-tests test demo crds bench clean check-leftovers

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
# image-test-prereqs builds the image tests/cluster/test_image.py runs (needs a container engine:
# .ci/run installs podman; VGPU_SKIP_IMAGE_TESTS=1 skips that build and test).
test: setup controlplane lint image-test-prereqs
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
	$(BIN)/vgpu-operator crds --output-dir crds
	$(BIN)/vgpu-operator crds --output-dir charts/vgpu-operator/crds

bench: setup controlplane
	$(BIN)/python bench/convergence.py

# The container image and the release: hack/release.mk (make image, image-base,
# image-test-prereqs, release).
include hack/release.mk

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
