"""The repository's Dockerfile and .dockerignore, read as the tests need them (no container
engine here: the tests check what the image will hold and run instead of building it)."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Dockerfile:
    args: dict[str, str]  # ARGs before the first FROM, with their defaults
    stages: list[Stage]

    def final(self, instruction: str) -> list[str]:
        return [v for k, v in self.stages[-1].instructions if k == instruction]

    def stage_arg(self, name: str) -> str | None:
        for key, value in self.stages[-1].instructions:
            if key == "ARG" and value.split("=", 1)[0] == name:
                return value.split("=", 1)[1] if "=" in value else None
        return None


def parse() -> Dockerfile:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if instruction == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], name))
        elif not stages and instruction == "ARG":
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append((instruction, rest))
    return Dockerfile(args, stages)


def exec_form(value: str) -> list[str]:
    """ENTRYPOINT/CMD in exec form (a JSON array); the shell form is refused."""
    parsed = json.loads(value)
    assert isinstance(parsed, list), f"not the exec form: {value}"
    return [str(p) for p in parsed]


def ignored(path: str) -> bool:
    """Whether .dockerignore keeps `path` (relative, '/'-separated) out of the build context:
    the last matching rule wins, `!` re-includes (Docker's semantics for the patterns used)."""
    result = False
    for raw in DOCKERIGNORE.read_text().splitlines():
        rule = raw.strip()
        if not rule or rule.startswith("#"):
            continue
        negate = rule.startswith("!")
        pattern = rule[1:] if negate else rule
        pattern = pattern.rstrip("/")
        parts = path.split("/")
        if pattern.startswith("**/"):  # at any depth: one path component
            matched = any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        else:  # from the context's root: the path or a directory holding it
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            matched = any(fnmatch.fnmatchcase(prefix, pattern) for prefix in prefixes)
        if matched:
            result = not negate
    return result


def build_context(into: Path) -> list[str]:
    """Copy what the build stage's COPY instructions take from the repository, less what
    .dockerignore keeps out, to `into`; returns the relative paths copied."""
    copied: list[str] = []
    for instruction, value in parse().stages[0].instructions:
        if instruction != "COPY" or value.startswith("--from"):
            continue
        *sources, _ = value.split()
        for source in sources:
            origin = ROOT / source
            files = [origin] if origin.is_file() else sorted(origin.rglob("*"))
            for f in files:
                rel = f.relative_to(ROOT).as_posix()
                if f.is_dir() or ignored(rel):
                    continue
                (into / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, into / rel)
                copied.append(rel)
    return copied
