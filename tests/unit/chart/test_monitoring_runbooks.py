"""A runbook per alert: every alert of the rendered PrometheusRule carries a `runbook_url` that is
the chart value monitoring.rules.runbookUrl plus the anchor of its own section of
docs/runbooks.md (GitHub's anchor of a heading: the alert's name in lower case), the page has a
section for each alert and none for an alert that does not exist, each section says what the
alert means, how to confirm it and how to fix it, and the value is checked by the schema."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml

from vgpu_devcluster import binaries
from vgpu_devcluster.install import VAP_API, chart_dir, render_chart

RUNBOOKS = binaries.repo_root() / "docs" / "runbooks.md"
RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
DEFAULT_URL = yaml.safe_load((chart_dir() / "values.yaml").read_text())["monitoring"]["rules"][
    "runbookUrl"
]
_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$", re.MULTILINE)
_ALERT_NAME = re.compile(r"^VGPU[A-Za-z]+$")


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as
    hyphens (github/cmark-gfm's anchors, as in https://github.com/Flet/github-slugger)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _sections() -> dict[str, str]:
    """Level-2 heading -> its text up to the next level-2 heading."""
    text = RUNBOOKS.read_text()
    heads = [m for m in _HEADING.finditer(text) if m[1] == "##"]
    return {
        m[2]: text[m.end() : (heads[i + 1].start() if i + 1 < len(heads) else len(text))]
        for i, m in enumerate(heads)
    }


def _alerts(values: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    docs = render_chart(values=values, api_versions=(VAP_API, RULE_API))
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


def test_every_alert_links_its_own_section_of_the_runbooks() -> None:
    alerts = _alerts()
    sections = _sections()
    anchors = {github_anchor(h): h for h in sections}
    assert DEFAULT_URL.endswith("/docs/runbooks.md")
    for name, rule in alerts.items():
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == DEFAULT_URL, (name, url)
        assert anchors.get(anchor) == name, f"{name}: no heading '## {name}' for #{anchor}"
    documented = {h for h in sections if _ALERT_NAME.match(h)}
    assert documented == set(alerts), documented ^ set(alerts)
    # the page's own links to its sections (the table at the top) resolve
    for target in re.findall(r"\]\(#([\w-]+)\)", RUNBOOKS.read_text()):
        assert target in anchors, target


def test_every_section_says_what_it_means_how_to_confirm_and_fix() -> None:
    for name, text in _sections().items():
        if not _ALERT_NAME.match(name):
            continue
        for part in ("**Meaning.**", "**Confirm.**", "**Fix.**"):
            assert part in text, f"{name}: no {part}"
        assert "```sh" in text or "PromQL:" in text, f"{name}: nothing to run"


def test_the_runbook_url_value_moves_every_link() -> None:
    url = "https://wiki.example.com/gpu/vgpu-operator-runbooks"
    alerts = _alerts({"monitoring.rules.runbookUrl": url})
    assert {r["annotations"]["runbook_url"] for r in alerts.values()} == {
        f"{url}#{name.lower()}" for name in alerts
    }


@pytest.mark.parametrize(
    "bad", ["docs/runbooks.md", "https://example.com/runbooks.md#x", "https://ex ample.com"]
)
def test_the_schema_refuses_a_runbook_url_that_is_no_page_url(bad: str) -> None:
    args = [str(binaries.ensure("helm")), "template", str(chart_dir())]
    args += ["--kube-version", binaries.KUBERNETES_VERSION]
    args += ["--set-string", f"monitoring.rules.runbookUrl={bad}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "runbookUrl" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("VGPUNodeFailed", "vgpunodefailed"),
        ("Runbooks: the chart's alerts", "runbooks-the-charts-alerts"),
        ("A b-c d_e", "a-b-c-d_e"),
    ],
)
def test_github_anchor(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor
