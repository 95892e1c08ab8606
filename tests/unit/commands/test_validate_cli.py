"""`vgpu-operator validate` as a command: files, directories and stdin, several documents per
file, each kind it knows (a policy, the operator configuration, the chart's values) and the
kinds it does not, the three outputs, and the exit codes of commands/exitcodes.py (0 valid,
1 an invalid document, 2 usage, 3 a file that cannot be read). No cluster anywhere."""

from __future__ import annotations

import io
import json
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.invalid_specs import by_name
from vgpu_operator import contract
from vgpu_operator.commands import cli, exitcodes

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
SELECTOR = {"matchLabels": {"nvidia.com/gpu.present": "true"}}


def policy(name: str, spec: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return {
        "apiVersion": contract.API_VERSION,
        "kind": contract.POLICY_KIND,
        "metadata": {"name": name},
        "spec": spec if spec is not None else {"mode": "hami-core", "nodeSelector": SELECTOR},
        **top,
    }


def dump(*docs: Any) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def run(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    stdin: str = "",
) -> tuple[int, str, str]:
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # main's SIGTERM handler
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    try:
        code = cli.main(["validate", *argv])
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def as_json(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, dict[str, Any]]:
    code, out, _ = run([*argv, "-o", "json"], capsys, monkeypatch)
    return code, json.loads(out)


def example_files() -> list[Path]:
    policies = [*EXAMPLES.glob("*/policy.yaml"), *EXAMPLES.glob("*/policies.yaml")]
    configs = list(EXAMPLES.glob("*/operator-config/*.yaml"))
    assert len(policies) >= 5 and len(configs) >= 2
    return sorted(policies + configs)


def test_the_examples_are_valid(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [a for f in example_files() for a in ("-f", str(f))]
    code, data = as_json(argv, capsys, monkeypatch)
    assert code == exitcodes.OK, data
    kinds = {d["kind"] for d in data["documents"]}
    assert kinds == {"VGPUNodePolicy", "OperatorConfig", "HelmValues"}
    assert data["valid"] and all(d["result"] == "valid" for d in data["documents"])


def test_a_file_of_several_documents_names_each_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mixed.yaml"
    path.write_text(
        dump(
            policy("good"),
            policy("bad-cel", by_name("no-execute-taint").spec),
            policy("overlap", by_name("overlapping-layouts").spec),
            {"onDelete": "Delet"},
            {"config": {"mode": "enforc"}, "image": {"tag": "x"}},
        )
    )
    code, data = as_json(["-f", str(path)], capsys, monkeypatch)
    assert code == exitcodes.FINDINGS
    docs = {d["line"]: d for d in data["documents"]}
    assert sorted(docs) == [d["line"] for d in data["documents"]]
    got = [
        (d["kind"], d["name"], d["result"], d["refusedBy"], [p["field"] for p in d["problems"]])
        for d in data["documents"]
    ]
    assert got == [
        ("VGPUNodePolicy", "good", "valid", None, []),
        ("VGPUNodePolicy", "bad-cel", "invalid", "apiserver", ["spec.nodeTaints"]),
        ("VGPUNodePolicy", "overlap", "invalid", "operator", ["spec.mig.layout[1].gpus"]),
        ("OperatorConfig", None, "invalid", "operator", ["onDelete"]),
        ("HelmValues", None, "invalid", "operator", ["config.mode"]),
    ]
    for doc in data["documents"]:
        assert doc["file"] == str(path)
        for problem in doc["problems"]:
            assert problem["message"] and problem["fix"], problem
    cel = data["documents"][1]["problems"][0]
    assert "allowNoExecute" in cel["message"] and cel["rule"].startswith("!has(self.nodeTaints)")


def test_the_table_names_the_document_the_field_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.yaml"
    text = dump(policy("ok"), policy("typo", {**by_name("typo-in-field-name").spec}))
    path.write_text(text)
    second = text.splitlines().index("---") + 2
    code, out, _ = run(["-f", str(path)], capsys, monkeypatch)
    assert code == exitcodes.FINDINGS
    assert f"{path}:1" in out and "valid" in out
    assert "refused by the apiserver (1 problem)" in out
    assert f"{path}:{second} VGPUNodePolicy typo: spec.hamicore (apiserver)" in out
    assert 'unknown field "spec.hamicore"' in out
    assert "Fix: remove it or correct its spelling; the fields allowed here are:" in out
    assert "2 document(s): 1 valid, 1 invalid, 0 not checked" in out


def test_yaml_output_is_the_json_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(dump(policy("x", by_name("empty-profiles").spec)))
    _, from_json = as_json(["-f", str(path)], capsys, monkeypatch)
    code, out, _ = run(["-f", str(path), "-o", "yaml"], capsys, monkeypatch)
    assert code == exitcodes.FINDINGS
    assert yaml.safe_load(out) == from_json


def test_stdin_and_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a.yaml").write_text(dump(policy("a")))
    (tmp_path / "b.json").write_text(json.dumps(policy("b")))
    (tmp_path / "notes.txt").write_text("not read")
    stdin = dump(policy("from-stdin", by_name("k8s-io-label").spec))
    code, out, _ = run(["-f", str(tmp_path), "-f", "-", "-o", "json"], capsys, monkeypatch, stdin)
    data = json.loads(out)
    assert code == exitcodes.FINDINGS
    files = [(Path(d["file"]).name, d["name"], d["result"]) for d in data["documents"]]
    assert files == [
        ("a.yaml", "a", "valid"),
        ("b.json", "b", "valid"),
        ("<stdin>", "from-stdin", "invalid"),
    ]


def test_a_list_is_checked_item_by_item(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    live = policy("live", status={"observedGeneration": 1})
    live["metadata"].update(uid="u", resourceVersion="7", generation=1, managedFields=[])
    listed = {"apiVersion": "v1", "kind": "List", "items": [live, policy("Bad")]}
    code, out, _ = run(["-f", "-", "-o", "json"], capsys, monkeypatch, dump(listed))
    docs = json.loads(out)["documents"]
    assert code == exitcodes.FINDINGS
    assert [(d["name"], d["result"]) for d in docs] == [("live", "valid"), ("Bad", "invalid")]


def test_unknown_kinds_are_reported_and_may_be_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.yaml"
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu"}}
    path.write_text(dump(ns, policy("ok")))
    code, data = as_json(["-f", str(path)], capsys, monkeypatch)
    assert code == exitcodes.FINDINGS and not data["valid"]
    first = data["documents"][0]
    assert (first["kind"], first["name"], first["result"]) == ("Namespace", "gpu", "not-checked")
    assert data["summary"] == {"documents": 2, "valid": 1, "invalid": 0, "notChecked": 1}
    code, out, _ = run(["-f", str(path), "--ignore-unknown-kinds"], capsys, monkeypatch)
    assert code == exitcodes.OK
    assert "skipped: not a kind validate checks" in out


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: [b\n", "not valid YAML at line 2"),
        ("", "holds no YAML document"),
        ("- a\n- b\n", "a list, not a mapping"),
        (dump(policy("x", apiVersion="vgpu.volcano.sh/v1")), "is not served"),
    ],
    ids=["not-yaml", "empty", "a-list", "wrong-api-version"],
)
def test_what_is_not_a_valid_document_is_a_finding(
    text: str,
    says: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    code, out, _ = run(["-f", str(path)], capsys, monkeypatch)
    assert code == exitcodes.FINDINGS, out
    assert says in out


def test_a_values_file_without_config_is_told_where_the_config_goes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text("image: {tag: x}\n")
    code, data = as_json(["-f", str(path)], capsys, monkeypatch)
    (problem,) = data["documents"][0]["problems"]
    assert code == exitcodes.FINDINGS
    assert problem["field"] == "image" and "under its `config:` key" in problem["fix"]


def test_an_unreadable_file_exits_3_after_checking_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(dump(policy("good")))
    code, out, err = run(["-f", "/nope.yaml", "-f", str(good), "-o", "json"], capsys, monkeypatch)
    data = json.loads(out)
    assert code == exitcodes.CANNOT
    assert "cannot read /nope.yaml" in err
    assert [d["name"] for d in data["documents"]] == ["good"]
    assert data["unreadable"] == [{"file": "/nope.yaml", "error": "No such file or directory"}]
    assert not data["valid"]


def test_an_empty_directory_cannot_be_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(["-f", str(tmp_path)], capsys, monkeypatch)
    assert code == exitcodes.CANNOT and str(tmp_path) in err


@pytest.mark.parametrize(
    "argv",
    [[], ["-f", "-", "-f", "-"], ["-f", "x.yaml", "-o", "bogus"]],
    ids=["no-file", "stdin-twice", "bad-output"],
)
def test_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, err = run(argv, capsys, monkeypatch)
    assert code == exitcodes.USAGE and err


def test_help_names_the_exit_codes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(["--help"], capsys, monkeypatch)
    assert code == 0
    assert "validate found an invalid document" in out
    assert "--ignore-unknown-kinds" in out


def test_yaml_is_read_as_kubectl_sends_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A date stays a string and a number as a map key is a string key (JSON has no other)."""
    text = dump(policy("dated", {"mode": "hami-core", "nodeSelector": SELECTOR}))
    text += "  nodeLabels:\n    since: 2026-01-31\n    1: 'one'\n"
    code, out, _ = run(["-f", "-"], capsys, monkeypatch, text)
    assert code == exitcodes.OK, out


def billion_laughs() -> str:
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return dump(policy("laughs"))[:-1] + "\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (billion_laughs(), "its aliases expand it past 1000000 values"),
        ("a: &a [*a]\n", "or it holds itself"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
    ],
    ids=["billion-laughs", "a-cycle", "deep"],
)
def test_hostile_yaml_is_a_finding_in_bounded_time(
    text: str, says: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(["-f", "-"], capsys, monkeypatch, text)
    assert code == exitcodes.FINDINGS
    assert says in out
