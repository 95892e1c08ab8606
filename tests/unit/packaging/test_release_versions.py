"""One version for a release: pyproject's, the chart's `version` and `appVersion`, the image tag
`make image` builds and the chart deploys, the image's version label, the git tag the GitOps
examples check out (`v<version>`) and a CHANGELOG section. `make release` runs this first.
And the licence the packages declare is the one LICENSE holds."""

from __future__ import annotations

import hashlib
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

from vgpu_devcluster.install import render_chart

ROOT = Path(__file__).resolve().parents[3]
OUR_REPO = "github.com/vgpu-operator/vgpu-operator"
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt (Debian's
# /usr/share/common-licenses/Apache-2.0 is the same file)
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def version() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def chart() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "charts/vgpu-operator/Chart.yaml").read_text())
    return loaded


def test_the_chart_carries_the_package_version() -> None:
    meta = chart()
    assert meta["version"] == version()
    assert str(meta["appVersion"]) == version()
    # the image the chart deploys: values.yaml's repository, tagged appVersion by default
    values = yaml.safe_load((ROOT / "charts/vgpu-operator/values.yaml").read_text())
    images = {
        c["image"]
        for doc in render_chart()
        if doc["kind"] in ("Deployment", "DaemonSet", "Job")
        for c in doc["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"{values['image']['repository']}:{version()}"}


def test_make_image_tags_the_image_the_chart_deploys() -> None:
    values = yaml.safe_load((ROOT / "charts/vgpu-operator/values.yaml").read_text())
    done = subprocess.run(
        ["make", "-s", "--no-print-directory", "image-name"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{values['image']['repository']}:{version()}"


def test_the_dockerfile_labels_the_image_with_the_version() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG VERSION=(\S+)$", dockerfile, re.M)[1] == version()  # type: ignore[index]
    assert 'org.opencontainers.image.version="${VERSION}"' in dockerfile


def _gitops_revisions() -> list[tuple[str, str]]:
    """(file, revision) of every GitOps object that checks out this repository."""
    found = []
    for path in sorted((ROOT / "examples/gitops").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            spec = doc.get("spec") or {}
            if doc["kind"] == "Application":  # Argo CD
                sources = [spec["source"]] if "source" in spec else spec.get("sources", [])
                for source in sources:
                    if OUR_REPO in source.get("repoURL", ""):
                        found.append((path.name, str(source.get("targetRevision"))))
            elif doc["kind"] == "GitRepository" and OUR_REPO in spec.get("url", ""):  # Flux
                ref = spec.get("ref") or {}
                found.append((path.name, str(ref.get("tag") or ref.get("semver") or ref)))
    return found


def test_the_gitops_examples_check_out_the_release_tag() -> None:
    revisions = _gitops_revisions()
    assert {name for name, _ in revisions} == {
        p.name for p in (ROOT / "examples/gitops").glob("*.yaml")
    }
    assert revisions and all(rev == f"v{version()}" for _, rev in revisions), revisions


def test_the_changelog_has_the_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(\d[^\]]*)\]", changelog, re.M)
    assert releases and releases[0] == version(), releases
    assert f"[{version()}]: https://{OUR_REPO}/releases/tag/v{version()}" in changelog


def test_license_is_the_apache_2_0_text_the_packages_declare() -> None:
    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_0_SHA256
    for pyproject in (ROOT / "pyproject.toml", ROOT / "devtools/pyproject.toml"):
        assert tomllib.loads(pyproject.read_text())["project"]["license"] == "Apache-2.0"
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()
