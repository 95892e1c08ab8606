"""The committed CRD is exactly what the models generate (regenerate with `vgpu-operator crds`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from vgpu_operator.crdgen import CRD_NAME, render_crd, render_crds, write_crds

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "crds" / f"{CRD_NAME}.yaml"


def test_committed_crd_matches_the_models() -> None:
    assert COMMITTED.exists(), f"{COMMITTED} is missing: run `vgpu-operator crds`"
    assert COMMITTED.read_text() == render_crd(CRD_NAME), (
        f"{COMMITTED.relative_to(REPO)} drifted from the models: regenerate it with "
        "`vgpu-operator crds` (crdgen.write_crds('crds'))"
    )


def test_the_charts_copy_matches_the_models() -> None:
    chart = REPO / "charts" / "vgpu-operator" / "crds" / f"{CRD_NAME}.yaml"
    assert chart.read_text() == render_crd(CRD_NAME), (
        f"{chart.relative_to(REPO)} drifted from the models: `make crds` writes both copies"
    )


def test_crds_dir_holds_only_generated_files() -> None:
    generated = {f"{CRD_NAME}.yaml"}
    assert {p.name for p in COMMITTED.parent.glob("*.yaml")} == generated


def test_rendering_is_deterministic_and_parses(tmp_path: Path) -> None:
    assert render_crds() == render_crds()
    written = write_crds(tmp_path)
    assert [p.name for p in written] == [f"{CRD_NAME}.yaml"]
    assert written[0].read_text() == render_crd(CRD_NAME)
    docs = [d for d in yaml.safe_load_all(render_crds()) if d]
    assert [d["metadata"]["name"] for d in docs] == [CRD_NAME]
    assert render_crds().startswith("# Generated")
