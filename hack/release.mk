# The container image and the release (included by the Makefile). docs/install-image.md says
# how to build the image (size, build time, behind a proxy, air-gapped), docs/release.md how to
# cut a release.
#
#   make image               the image as $(IMAGE), with docker, podman or buildah
#   make image-base          the base made from Debian's packages (mmdebstrap), imported
#   make image-test-prereqs  what tests/cluster/test_image.py runs: $(TEST_IMAGE) on that base
#   make release             image, packaged chart and CRDs in $(DIST), one version throughout
#
# Variables:
#   PYTHON_IMAGE=<ref>   the base (default: the Dockerfile's, the official Python slim image by
#                        digest); BASE=debian builds on the base `make image-base` makes
#   CA_BUNDLE=<pem>      a TLS-inspecting proxy's CA bundle, mounted as a build secret only
#                        (default: this host's bundle; CA_BUNDLE= for none)
#   PIP_INDEX_URL=<url>  a PyPI mirror for the build (air-gapped builds)
#   CONTAINER_ENGINE=<engine>, IMAGE_BUILD_FLAGS=<more build flags>, IMAGE_REPO=<registry/repo>

VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE_REPO ?= ghcr.io/vgpu-operator/vgpu-operator
IMAGE ?= $(IMAGE_REPO):$(VERSION)
TEST_IMAGE ?= localhost/vgpu-operator:test
PYTHON_IMAGE ?=
BASE ?=
CA_BUNDLE ?= $(firstword $(wildcard /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt))
DIST ?= dist
CHART_REPO ?= oci://ghcr.io/vgpu-operator/charts
IMAGE_SH := hack/image/image.sh
export CONTAINER_ENGINE CA_BUNDLE PIP_INDEX_URL IMAGE_BUILD_FLAGS

.PHONY: image image-base image-test-prereqs image-name release

image:
	@base="$(PYTHON_IMAGE)"; \
	if [ -z "$$base" ] && [ "$(BASE)" = debian ]; then base=$$($(IMAGE_SH) base) || exit 1; fi; \
	$(IMAGE_SH) build "$(IMAGE)" $$base

image-base:
	@$(IMAGE_SH) base

# The image test's image, on a base from Debian's packages (no registry needed). The engine
# itself is .ci/run's to install (hack/image/image.sh install). VGPU_SKIP_IMAGE_TESTS=1 (and
# only that) skips both the build and the test.
image-test-prereqs:
	@if [ "$$VGPU_SKIP_IMAGE_TESTS" = 1 ]; then \
	  echo "==> VGPU_SKIP_IMAGE_TESTS=1: the image is neither built nor tested"; \
	else \
	  start=$$SECONDS; base=$$($(IMAGE_SH) base) && $(IMAGE_SH) build "$(TEST_IMAGE)" "$$base" && \
	  echo "==> $(TEST_IMAGE) ready in $$((SECONDS - start))s (base $$base)"; \
	fi

image-name:
	@echo "$(IMAGE)"

# One version everywhere (the test below fails otherwise), then the artifacts:
#   $(DIST)/vgpu-operator-$(VERSION).tgz           the chart (helm package), CRDs in its crds/
#   $(DIST)/vgpu-operator-$(VERSION).crds.yaml     the CRDs, for `kubectl apply --server-side`
#   $(DIST)/vgpu-operator-$(VERSION).image.tar     the image $(IMAGE), an OCI archive
#   $(DIST)/SHA256SUMS
release: setup controlplane
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/packaging/test_release_versions.py \
	  tests/unit/packaging/test_helm_defaults.py
	@$(MAKE) --no-print-directory image
	rm -rf $(DIST) && mkdir -p $(DIST)
	@helm=$$($(BIN)/python -c 'from vgpu_devcluster import binaries; print(binaries.ensure("helm"))') && \
	  set -x && $$helm lint --strict charts/vgpu-operator && \
	  $$helm package charts/vgpu-operator -d $(DIST)
	$(BIN)/vgpu-operator crds > $(DIST)/vgpu-operator-$(VERSION).crds.yaml
	$(IMAGE_SH) save "$(IMAGE)" $(DIST)/vgpu-operator-$(VERSION).image.tar
	cd $(DIST) && sha256sum vgpu-operator-$(VERSION)* > SHA256SUMS && cat SHA256SUMS
	@echo "==> release $(VERSION) built in $(DIST)/. To publish (docs/release.md):"
	@echo "    git tag -s v$(VERSION) -m 'vgpu-operator $(VERSION)' && git push origin v$(VERSION)"
	@echo "    $$($(IMAGE_SH) engine) push $(IMAGE)"
	@echo "    helm push $(DIST)/vgpu-operator-$(VERSION).tgz $(CHART_REPO)"
