"""Formatting rule results for `vgpu-operator doctor`: a table (rule, object, status, fix) with
the full message of every finding under it, or JSON; and the exit code (non-zero when
anything is wrong). Pure: the caller prints."""

from __future__ import annotations

import json
import textwrap
from typing import Any

from vgpu_operator.core.rules.base import RuleResults

COLUMNS = ("RULE", "OBJECT", "STATUS", "FIX")
MAX_OBJECT = 60
MAX_FIX = 70


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(
        text,
        96,
        initial_indent="   ",
        subsequent_indent="   ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def rows(results: RuleResults) -> list[tuple[str, str, str, str]]:
    """One row per finding; a rule without findings gets one `ok` row."""
    out: list[tuple[str, str, str, str]] = []
    for r in results.rules:
        found = results.for_rule(r.id)
        if not found:
            out.append((r.id, "-", "ok", "-"))
            continue
        for f in found:
            obj = ", ".join(str(o) for o in f.objects) or "-"
            out.append((r.id, _cut(obj, MAX_OBJECT), f.severity, _cut(f.fix, MAX_FIX)))
    return out


def summary(results: RuleResults) -> dict[str, int]:
    counts = {"error": 0, "warning": 0, "info": 0}
    for f in results.findings:
        counts[f.severity] += 1
    counts["fixable_by_operator"] = sum(1 for f in results.findings if f.fixable_by_operator)
    counts["rules"] = len(results.rules)
    counts["rules_ok"] = sum(1 for r in results.rules if not results.for_rule(r.id))
    return counts


def format_table(results: RuleResults, *, details: bool = True) -> str:
    table = [COLUMNS, *rows(results)]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]
    counts = summary(results)
    lines.append("")
    lines.append(
        f"{counts['rules']} rules: {counts['rules_ok']} ok, {counts['error']} error(s), "
        f"{counts['warning']} warning(s), {counts['info']} note(s); "
        f"{counts['fixable_by_operator']} fixable by the operator in enforce mode"
    )
    if details and results.findings:
        lines.append("")
        lines.append("Findings:")
        for i, f in enumerate(results.findings, start=1):
            objects = ", ".join(str(o) for o in f.objects) or "-"
            lines.append(f"{i}. [{f.severity}] {f.id}: {objects}")
            fix = f"Fix{' (operator)' if f.fixable_by_operator else ''}: {f.fix}"
            for paragraph in (f.message, fix):
                lines.extend(_wrap(paragraph))
    return "\n".join(lines) + "\n"


def to_json_data(results: RuleResults) -> dict[str, Any]:
    return {
        "summary": summary(results),
        "rules": [
            {"id": r.id, "title": r.title, "status": results.status(r.id)} for r in results.rules
        ],
        "findings": [f.model_dump(mode="json") for f in results.findings],
    }


def format_json(results: RuleResults) -> str:
    return json.dumps(to_json_data(results), indent=2, ensure_ascii=False) + "\n"


def exit_code(results: RuleResults) -> int:
    """0 when nothing is wrong (only ok rules and notes), 1 otherwise."""
    return 1 if any(f.severity in ("error", "warning") for f in results.findings) else 0
