"""Readable errors for the operator configuration: one line per problem naming the field path
(camelCase, `a.b[0].c`) and the fix: the field's own `fix` text where it has one, else a fix
derived from the kind of error (unknown key: the keys allowed there)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class ConfigIssue:
    path: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}. Fix: {self.fix}"


class ConfigError(ValueError):
    """Invalid operator configuration: one `ConfigIssue` per problem, each naming the field."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        lines = "\n".join(f"  - {i}" for i in issues)
        super().__init__(f"invalid operator configuration:\n{lines}")


def validation_issues(exc: ValidationError, root: type[BaseModel]) -> list[ConfigIssue]:
    return [_issue(err, root) for err in exc.errors()]


def _format_path(loc: tuple[str | int, ...], subpath: str = "") -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    if subpath:
        out = f"{out}.{subpath}" if out and not subpath.startswith("[") else out + subpath
    return out or "<config>"


def _issue(err: Any, root: type[BaseModel]) -> ConfigIssue:
    loc: tuple[str | int, ...] = tuple(err.get("loc", ()))
    kind: str = err.get("type", "")
    message: str = err.get("msg", "invalid")
    ctx: dict[str, Any] = err.get("ctx") or {}
    if kind == "operator_config":
        return ConfigIssue(_format_path(loc, str(ctx["subpath"])), message, str(ctx["fix"]))
    if kind == "string_pattern_mismatch":
        message = f"{err.get('input')!r} is not valid here"
    fix = ""
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], root)
        message = f"unknown key {loc[-1]!r}" if loc else "unknown key"
        fix = "remove it or correct its spelling" + (
            f"; the keys allowed here are: {', '.join(allowed)}" if allowed else ""
        )
    elif kind == "missing":
        field_fix = _field_fix(loc, root)
        fix = "add this field" + (f" ({field_fix})" if field_fix else "")
    else:
        fix = _field_fix(loc, root) or _generic_fix(kind)
    return ConfigIssue(_format_path(loc), message, fix)


def _generic_fix(kind: str) -> str:
    if kind == "literal_error":
        return "use one of the values named above"
    if kind.startswith(("greater_than", "less_than")):
        return "use a value inside the range named above"
    if kind.endswith(("_type", "_parsing")):
        return "give a value of the type named above"
    return "correct the value as described"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside a field annotation (through Optional, list, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is None:
        return None
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def _field_at(model: type[BaseModel], key: str) -> FieldInfo | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    return None


def _walk(
    loc: tuple[str | int, ...], root: type[BaseModel]
) -> tuple[type[BaseModel] | None, FieldInfo | None]:
    model: type[BaseModel] | None = root
    info: FieldInfo | None = None
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None:
            return None, None
        info = _field_at(model, part)
        if info is None:
            return None, None
        model = _model_of(info.annotation)
    return model, info


def _field_fix(loc: tuple[str | int, ...], root: type[BaseModel]) -> str | None:
    _, info = _walk(loc, root)
    if info is None:
        return None
    extra = info.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("fix"), str):
        return str(extra["fix"])
    for meta in info.metadata:
        meta_extra = getattr(meta, "json_schema_extra", None)
        if isinstance(meta_extra, dict) and isinstance(meta_extra.get("fix"), str):
            return str(meta_extra["fix"])
    return None


def _allowed_keys(loc: tuple[str | int, ...], root: type[BaseModel]) -> list[str]:
    model, _ = _walk(loc, root) if loc else (root, None)
    if model is None:
        return []
    return sorted(info.alias or name for name, info in model.model_fields.items())
