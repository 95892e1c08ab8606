"""`vgpu-operator validate`: check policies and the operator configuration, offline.

    vgpu-operator validate -f policy.yaml                # one file (several documents)
    vgpu-operator validate -f policies/ -f values.yaml   # a directory's .yaml/.yml/.json files
    kubectl get vnp -o yaml | vgpu-operator validate -f -   # live policies, this version's rules

Each document is one of:
  VGPUNodePolicy     checked as the apiserver checks it: the object (apiVersion, name, no
                     unknown field: kubectl's default Strict field validation), the CRD's
                     schema and its CEL rules, from the same models the CRD is generated from;
                     then as the operator checks it (what the CRD cannot say: overlapping
                     static MIG layouts, a `gpus` value of another type). Nothing reads a node:
                     a policy's problems on some node's hardware show on its status.
  operator config    a document without kind: the file `run --config` reads;
  Helm values        a document without kind with a `config:` key: the chart's values, whose
                     `config` is the operator configuration (the rest is Helm's schema's).
A valid policy is also checked against the `policyKeys` of each valid configuration given
beside it (`-f policies/ -f values.yaml`): a label or taint key it does not list is a problem,
as the operator refuses the policy for it. A values file that sets no `config.policyKeys`
takes the chart's default list, which validate does not read: give it explicitly to check.
A List's items are checked one by one; any other kind is reported as not checked. No cluster
and no kubeconfig are needed.

Exit code: 0 when every document is valid, 1 when one is not (or is of a kind validate does
not check, unless --ignore-unknown-kinds), 2 on a bad option, 3 when a file cannot be read
(the others are still checked and shown).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vgpu_operator import contract
from vgpu_operator.commands import exitcodes
from vgpu_operator.commands.validate_checks import (
    check_config,
    check_policy,
    check_policy_keys,
    config_policy_keys,
)
from vgpu_operator.commands.validate_spec import Problem
from vgpu_operator.commands.validate_yaml import parse

SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "<stdin>"


def add_subcommand(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate",
        help="check policies and the operator configuration offline (no cluster)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="a YAML file, a directory of them, or '-' for stdin (repeatable)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    parser.add_argument(
        "--ignore-unknown-kinds",
        action="store_true",
        help="list documents of other kinds as skipped, without failing for them",
    )
    parser.set_defaults(func=cmd_validate)


@dataclass
class Document:
    """One document of a file and what validate found in it."""

    file: str
    index: int  # 1-based, among the file's documents that are not empty
    line: int  # where it starts, 1-based
    kind: str  # VGPUNodePolicy, OperatorConfig, HelmValues, or the kind as written
    name: str = ""
    problems: list[Problem] = field(default_factory=list)
    checked: bool = True  # False: a kind validate does not know
    # the policy, or the operator configuration (a values file's `config`), as read
    body: Any = field(default=None, repr=False, compare=False)

    @property
    def result(self) -> str:
        if not self.checked:
            return "not-checked"
        return "invalid" if self.problems else "valid"

    @property
    def refused_by(self) -> str | None:
        """Who refuses it first: the apiserver (kubectl apply fails), else the operator."""
        who = {p.refused_by for p in self.problems}
        return next((w for w in ("apiserver", "operator") if w in who), None)

    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "document": self.index,
            "line": self.line,
            "kind": self.kind,
            "name": self.name or None,
            "result": self.result,
            "refusedBy": self.refused_by,
            "problems": [p.to_json() for p in self.problems],
        }


# ---- reading --------------------------------------------------------------------------------


def classify(value: Any, file: str, index: int, line: int) -> Document:
    """What the document is, and its problems."""
    if isinstance(value, Problem):
        return Document(file, index, line, "", problems=[value])
    if not isinstance(value, dict):
        problem = Problem(
            "<document>",
            f"a {type(value).__name__}, not a mapping",
            "give VGPUNodePolicy objects or operator settings (key: value)",
            None,
        )
        return Document(file, index, line, "", problems=[problem])
    kind = value.get("kind")
    meta = value.get("metadata")
    name = str((meta.get("name") if isinstance(meta, dict) else None) or "")
    if kind == contract.POLICY_KIND:
        return Document(file, index, line, kind, name, check_policy(value), body=value)
    if kind is None and "apiVersion" not in value:
        if "config" in value:
            problems = check_config(value["config"], "config")
            return Document(
                file, index, line, "HelmValues", problems=problems, body=value["config"]
            )
        return Document(
            file, index, line, "OperatorConfig", problems=check_config(value), body=value
        )
    return Document(file, index, line, str(kind or ""), name, checked=False)


def _items(line: int, value: Any) -> Iterator[tuple[int, Any]]:
    """A document, or each item of a List (`kubectl get -o yaml` of several objects)."""
    if isinstance(value, dict) and value.get("kind") == "List":
        items = value.get("items")
        yield from ((line, item) for item in (items if isinstance(items, list) else []))
    else:
        yield line, value


def validate_text(text: str | None, file: str) -> list[Document]:
    """Every document of one file (None: not UTF-8 text), checked."""
    if text is None:
        problem = Problem("<file>", "not UTF-8 text", "give a YAML or JSON file", None)
        return [Document(file, 1, 1, "", problems=[problem])]
    found = [item for line, value in parse(text) for item in _items(line, value)]
    docs = [classify(value, file, i, line) for i, (line, value) in enumerate(found, start=1)]
    if not docs:
        problem = Problem(
            "<file>",
            "holds no YAML document",
            "give it VGPUNodePolicy documents or operator settings (an empty operator "
            "configuration is all defaults: nothing to check)",
            None,
        )
        docs.append(Document(file, 1, 1, "", problems=[problem]))
    return docs


def _files(path: str) -> list[Path]:
    p = Path(path)
    if not p.is_dir():
        return [p]
    found = sorted(f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file())
    if not found:
        raise FileNotFoundError(2, f"no {', '.join(SUFFIXES)} file in the directory", path)
    return found


def read_all(paths: list[str]) -> tuple[list[Document], list[tuple[str, str]]]:
    """The documents of every file, and the files that could not be read (path, why)."""
    docs: list[Document] = []
    unreadable: list[tuple[str, str]] = []
    for path in paths:
        if path == "-":
            docs += validate_text(_decode(sys.stdin.buffer.read()), STDIN)
            continue
        try:
            files = _files(path)
        except OSError as exc:
            unreadable.append((path, exc.strerror or str(exc)))
            continue
        for f in files:
            try:
                data = f.read_bytes()
            except OSError as exc:
                unreadable.append((str(f), exc.strerror or str(exc)))
                continue
            docs += validate_text(_decode(data), str(f))
    check_keys(docs)
    return docs, unreadable


def check_keys(docs: list[Document]) -> None:
    """Each valid policy against the `policyKeys` of each valid configuration among `docs`."""
    configs = [
        (d.where(), keys)
        for d in docs
        if d.kind in ("OperatorConfig", "HelmValues")
        and not d.problems
        and (keys := config_policy_keys(d.body)) is not None
    ]
    for d in docs:
        if d.kind == contract.POLICY_KIND and not d.problems:
            for where, keys in configs:
                d.problems += check_policy_keys(d.body, keys, where)


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


# ---- output ---------------------------------------------------------------------------------


def summary(docs: list[Document]) -> dict[str, int]:
    return {
        "documents": len(docs),
        "valid": sum(d.result == "valid" for d in docs),
        "invalid": sum(d.result == "invalid" for d in docs),
        "notChecked": sum(d.result == "not-checked" for d in docs),
    }


def to_json(
    docs: list[Document], unreadable: list[tuple[str, str]], ignore_unknown: bool = False
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "valid": exit_code(docs, unreadable, ignore_unknown) == exitcodes.OK,
        "summary": summary(docs),
        "documents": [d.to_json() for d in docs],
    }
    if unreadable:
        out["unreadable"] = [{"file": f, "error": why} for f, why in unreadable]
    return out


def _result_text(doc: Document, ignore_unknown: bool) -> str:
    if doc.result == "not-checked":
        return "skipped: not a kind validate checks" if ignore_unknown else "unknown kind"
    if doc.result == "valid":
        return "valid"
    count = f"{len(doc.problems)} problem{'s' if len(doc.problems) > 1 else ''}"
    if doc.refused_by == "apiserver":
        return f"refused by the apiserver ({count})"
    if doc.refused_by == "operator" and doc.kind == contract.POLICY_KIND:
        return f"applies, then the operator stalls it ({count})"
    if doc.refused_by == "operator":
        return f"the operator would not start ({count})"
    return f"invalid ({count})"


def format_table(docs: list[Document], ignore_unknown: bool) -> str:
    rows = [("DOCUMENT", "KIND", "NAME", "RESULT")]
    rows += [
        (d.where(), d.kind or "-", d.name or "-", _result_text(d, ignore_unknown)) for d in docs
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[3]]) for r in rows
    ]
    counts = summary(docs)
    lines += [
        "",
        f"{counts['documents']} document(s): {counts['valid']} valid, {counts['invalid']} "
        f"invalid, {counts['notChecked']} not checked",
    ]
    problems = [(d, p) for d in docs for p in d.problems]
    if problems:
        lines += ["", "Problems:"]
    for i, (d, p) in enumerate(problems, start=1):
        who = f" ({p.refused_by})" if p.refused_by else ""
        named = f" {d.kind}" + (f" {d.name}" if d.name else "") if d.kind else ""
        lines.append(f"{i}. {d.where()}{named}: {p.field}{who}")
        lines += [f"   {p.message}", f"   Fix: {p.fix}"]
    return "\n".join(lines) + "\n"


# ---- the command ----------------------------------------------------------------------------


def exit_code(docs: list[Document], unreadable: list[tuple[str, str]], ignore: bool) -> int:
    if unreadable:
        return exitcodes.CANNOT
    bad = [d for d in docs if d.result == "invalid" or (d.result == "not-checked" and not ignore)]
    return exitcodes.FINDINGS if bad else exitcodes.OK


def cmd_validate(args: argparse.Namespace) -> int:
    if args.filename.count("-") > 1:
        print("vgpu-operator validate: '-f -' (stdin) may be given once", file=sys.stderr)
        return exitcodes.USAGE
    docs, unreadable = read_all(args.filename)
    for path, why in unreadable:
        print(f"vgpu-operator validate: cannot read {path}: {why}", file=sys.stderr)
    data = to_json(docs, unreadable, args.ignore_unknown_kinds)
    if args.output == "json":
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif args.output == "yaml":
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
    elif docs:
        print(format_table(docs, args.ignore_unknown_kinds), end="")
    return exit_code(docs, unreadable, args.ignore_unknown_kinds)


def main(argv: list[str] | None = None) -> int:
    """`python -m vgpu_operator.commands.validate ...`: the subcommand on its own."""
    parser = argparse.ArgumentParser(prog="vgpu-operator")
    add_subcommand(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["validate", *(sys.argv[1:] if argv is None else argv)])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
