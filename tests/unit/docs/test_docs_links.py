"""The README and docs/ say only what is there: every relative link resolves to a file of the
repository (and its anchor, if it has one, to a heading of that file), every docs page is linked
from the README, and every `vgpu-operator ...` or `kubectl vgpu ...` command they show (in a
code block, or as inline code) exists with the flags shown: it is parsed by the command line's
own argparse parser (`commands/cli.py`, `commands/kubectl_plugin.py`), choices and types
included, without starting a process. Each check is shown failing on a synthetic page."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import posixpath
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[3]

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([\w+-]*)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
MENTION = re.compile(r"vgpu-operator|kubectl-vgpu|kubectl\s+vgpu")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")  # `--rule ID`: a value to fill in
# Code blocks in these languages hold data, not shell commands.
DATA_LANGUAGES = frozenset({"yaml", "yml", "json", "toml", "promql"})
# In these, a command is a line after a `$ ` prompt; the other lines are its output.
CONSOLE_LANGUAGES = frozenset({"console", "shell-session"})


@dataclass(frozen=True)
class Page:
    """A markdown page split into its prose (fenced blocks blanked, line numbers kept) and its
    fenced code blocks (language, first line number, body)."""

    path: Path
    prose: str
    blocks: tuple[tuple[str, int, str], ...]


def split_page(path: Path, text: str) -> Page:
    prose: list[str] = []
    blocks: list[tuple[str, int, str]] = []
    fence: str | None = None
    language, start, body = "", 0, []
    for number, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if fence is None and opening:
            fence, language, start, body = opening.group(1), opening.group(2).lower(), number, []
            prose.append("")
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)):
            if line.strip().strip(fence[0]) == "":
                blocks.append((language, start + 1, "\n".join(body)))
                fence = None
            else:
                body.append(line)
            prose.append("")
        elif fence is not None:
            body.append(line)
            prose.append("")
        else:
            prose.append(line)
    return Page(path, "\n".join(prose), tuple(blocks))


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text (a link's label, no tags), lower case,
    punctuation other than `-` and `_` dropped, spaces made `-`."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Page) -> set[str]:
    found: set[str] = set(HTML_ANCHOR.findall(page.prose))
    seen: dict[str, int] = {}
    for line in page.prose.splitlines():
        m = HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def without_code_spans(prose: str) -> str:
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), prose)


def link_targets(page: Page) -> Iterator[tuple[int, str]]:
    """(line number, target) of every link and reference definition in the prose."""
    prose = without_code_spans(page.prose)
    for pattern in (INLINE_LINK, REFERENCE_DEF):
        for m in pattern.finditer(prose):
            yield prose.count("\n", 0, m.start()) + 1, m.group(1)


def link_problems(page: Page, root: Path) -> list[str]:
    """A line per relative link that does not resolve: a missing file, a path outside `root`,
    or an anchor that is no heading of the target."""
    problems: list[str] = []
    where = page.path.relative_to(root).as_posix()
    for line, target in link_targets(page):
        if SCHEME.match(target):
            continue  # http(s), mailto: not this test's
        path_part, _, anchor = target.partition("#")
        if path_part:
            resolved = (page.path.parent / unquote(path_part)).resolve()
            if not resolved.is_relative_to(root):
                problems.append(f"{where}:{line}: {target} leaves the repository")
                continue
            if not resolved.exists():
                problems.append(f"{where}:{line}: {target} does not exist")
                continue
        else:
            resolved = page.path
        if anchor and resolved.suffix == ".md":
            linked = page if resolved == page.path else read_page(resolved)
            if unquote(anchor).lower() not in anchors(linked):
                problems.append(f"{where}:{line}: {target}: no heading #{anchor} there")
    return problems


def read_page(path: Path) -> Page:
    return split_page(path, path.read_text())


# --- commands -----------------------------------------------------------------------------------


def logical_lines(body: str) -> Iterator[tuple[int, str]]:
    """(offset of its first line, text) of each shell line, `\\` continuations joined."""
    pending: list[str] = []
    first = 0
    for offset, line in enumerate(body.splitlines()):
        if not pending:
            first = offset
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        yield first, " ".join([*pending, line])
        pending = []
    if pending:
        yield first, " ".join(pending)


def shell_commands(text: str) -> Iterator[tuple[str, list[str]]]:
    """Every `vgpu-operator` / `kubectl vgpu` invocation in shell text, as (program, args): a
    command at the start of a line or after `|`, `;`, `&&`, `(`, past `NAME=value` assignments.
    Comments are dropped. Raises ValueError on broken quoting."""
    for line in text.splitlines():
        if not MENTION.search(line):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        segment: list[str] = []
        for token in [*lexer, ";"]:
            if token and all(c in "();<>|&" for c in token):
                yield from _invocation(segment)
                segment = []
            else:
                segment.append(token)


def _invocation(segment: list[str]) -> Iterator[tuple[str, list[str]]]:
    words = list(segment)
    while words and (ENV_ASSIGNMENT.match(words[0]) or words[0] == "$"):
        words.pop(0)  # `NAME=value vgpu-operator ...`, a console's `$ vgpu-operator ...`
    if not words:
        return
    program = posixpath.basename(words[0])
    if program in ("vgpu-operator", "kubectl-vgpu"):
        yield ("kubectl vgpu" if program == "kubectl-vgpu" else program), words[1:]
    elif program == "kubectl" and words[1:2] == ["vgpu"]:
        yield "kubectl vgpu", words[2:]


def page_commands(page: Page) -> Iterator[tuple[int, str, list[str]]]:
    """(line, program, args) of each command in the page's code blocks and inline code."""
    for language, start, body in page.blocks:
        if language in DATA_LANGUAGES:
            continue
        for offset, line in logical_lines(body):
            if language in CONSOLE_LANGUAGES and not line.startswith("$ "):
                continue  # a console block's output, not a command
            for program, args in shell_commands(line):
                yield start + offset, program, args
    for m in CODE_SPAN.finditer(page.prose):
        span = " ".join(m.group(2).split()).removeprefix("$ ")
        line = page.prose.count("\n", 0, m.start()) + 1
        if MENTION.search(span):
            for program, args in shell_commands(span):
                yield line, program, args


@functools.cache
def parser_for(program: str) -> argparse.ArgumentParser:
    """The program's own parser, with nothing required: a page may name a command or show some
    of its flags (`vgpu-operator validate` in a table); what it shows must exist and parse."""
    if program == "vgpu-operator":
        from vgpu_operator.commands import cli

        parser = cli.build_parser()
    else:
        from vgpu_operator.commands import kubectl_plugin

        parser = kubectl_plugin.build_parser()
    optional_everything(parser)
    return parser


def optional_everything(parser: argparse.ArgumentParser) -> None:
    for group in parser._mutually_exclusive_groups:
        group.required = False
    for action in parser._actions:
        if action.option_strings:
            action.required = False
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                optional_everything(child)


def known_rules() -> set[str]:
    from vgpu_operator.core.rules import RULES

    return set(RULES)


def command_problem(program: str, args: list[str]) -> str | None:
    """Why `program args` is not a valid command line (argparse's own message), or None."""
    if program == "vgpu-operator" and not args:
        return None  # the bare name: the program, not a command
    if program == "kubectl vgpu" and (
        not args or (args[0].startswith("-") and args[0] not in ("-h", "--help"))
    ):
        args = ["get", *args]  # as kubectl_plugin.main: the overview
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            parsed = parser_for(program).parse_args(args)
    except SystemExit as exc:
        if exc.code in (0, None):
            return None  # --help, --version
        message = (stderr.getvalue().strip().splitlines() or ["refused"])[-1]
        if message.endswith("expected one argument") and args[-1].startswith("-"):
            return command_problem(program, args[:-1])  # `plan -f` in prose: the flag named
        return message
    shown = {r for r in getattr(parsed, "rule", None) or () if not PLACEHOLDER.match(r)}
    unknown = sorted(shown - known_rules())
    if getattr(parsed, "command", None) == "doctor" and unknown:
        return f"unknown doctor rule(s): {', '.join(unknown)}"
    return None


def command_problems(page: Page, root: Path) -> list[str]:
    where = page.path.relative_to(root).as_posix()
    problems: list[str] = []
    try:
        found = sorted(page_commands(page), key=lambda c: c[0])
    except ValueError as exc:
        return [f"{where}: a command line cannot be split as a shell would: {exc}"]
    for line, program, args in found:
        if problem := command_problem(program, args):
            problems.append(f"{where}:{line}: {program} {shlex.join(args)}: {problem}")
    return problems


# --- the repository's pages ---------------------------------------------------------------------


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_pages_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in doc_pages()}
    assert {"README.md", "docs/cli.md", "docs/compatibility.md"} <= names, names


@pytest.mark.parametrize("path", doc_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path: Path) -> None:
    assert link_problems(read_page(path), ROOT) == []


@pytest.mark.parametrize("path", doc_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_shown_exists_with_its_flags(path: Path) -> None:
    assert command_problems(read_page(path), ROOT) == []


def test_the_readme_links_every_docs_page() -> None:
    readme = read_page(ROOT / "README.md")
    linked = {
        (ROOT / unquote(t.partition("#")[0])).resolve()
        for _, t in link_targets(readme)
        if not SCHEME.match(t) and t.partition("#")[0]
    }
    pages = {p.resolve() for p in (ROOT / "docs").rglob("*.md")}
    assert sorted(p.relative_to(ROOT).as_posix() for p in pages - linked) == []


def test_the_readme_shows_the_commands_ci_runs() -> None:
    """`.ci/run` runs the README's test command; the README shows both of its commands."""
    readme = read_page(ROOT / "README.md")
    shown = "\n".join(body for _, _, body in readme.blocks)
    assert re.search(r"^make test\b", shown, re.MULTILINE), "the test command"
    assert re.search(r"^make demo\b", shown, re.MULTILINE), "the demo command"
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)


# --- the checks fail where they should (synthetic pages, nothing on disk edited) -----------------


def synthetic(tmp_path: Path, text: str, name: str = "docs/page.md") -> Page:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## Its `second` part: yes\n")
    path = tmp_path / name
    path.write_text(text)
    return read_page(path)


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = synthetic(
        tmp_path,
        "# Page\n\nSee [ok](other.md), [here](#page), [part](other.md#its-second-part-yes),\n"
        "[web](https://example.com/nowhere.md) and `[code](missing.md)`.\n\n"
        "```\n[in a block](missing.md)\n```\n\n"
        "[gone](missing.md), [bad anchor](other.md#third), [self](#nope),\n"
        "[outside](../../etc/passwd) and\n[ref]: nothing.md\n",
    )
    assert link_problems(page, tmp_path) == [
        "docs/page.md:10: missing.md does not exist",
        "docs/page.md:10: other.md#third: no heading #third there",
        "docs/page.md:10: #nope: no heading #nope there",
        "docs/page.md:11: ../../etc/passwd leaves the repository",
        "docs/page.md:12: nothing.md does not exist",
    ]


def test_a_link_across_a_line_break_and_a_duplicate_heading(tmp_path: Path) -> None:
    page = synthetic(
        tmp_path,
        "# Page\n\n## Step\n\n## Step\n\nSee [the second\nstep](#step-1) and [a third](#step-2).\n",
    )
    assert link_problems(page, tmp_path) == ["docs/page.md:8: #step-2: no heading #step-2 there"]


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("Seed 000: Volcano's vGPU guide (v1.11)", "seed-000-volcanos-vgpu-guide-v111"),
        (
            "What the operator may write: `enforce`, `report`",
            "what-the-operator-may-write-enforce-report",
        ),
        ("The node agent's `nvidia-smi`", "the-node-agents-nvidia-smi"),
        ("MIG disruption: `bench/mig_disruption.py`", "mig-disruption-benchmig_disruptionpy"),
        ("See [the CLI](cli.md)", "see-the-cli"),
    ],
)
def test_github_slugs(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_an_unknown_command_flag_or_value_is_found(tmp_path: Path) -> None:
    page = synthetic(
        tmp_path,
        "# Page\n\n"
        "```\n"
        "vgpu-operator doctor --discover -o json --rule ID     # fine: ID is a placeholder\n"
        "vgpu-operator doctor --no-such-flag\n"
        "KUBECONFIG=/tmp/k .venv/bin/vgpu-operator plan -f p.yaml -o xml\n"
        "kubectl vgpu get pools -o json | jq . && kubectl vgpu gett\n"
        "vgpu-operator cleanup --timeout soon \\\n"
        "  --dry-run\n"
        "helm install vgpu-operator charts/vgpu-operator   # not a vgpu-operator command\n"
        "```\n\n"
        "```yaml\ncommand: [vgpu-operator, nonsense]\n```\n\n"
        "Run `vgpu-operator valid8 -f x`, then `kubectl vgpu`, `vgpu-operator plan -o json -f`\n"
        "(the flag named, its value not; `--nope` is no command), `vgpu-operator doctor --rule\n"
        "no-such-rule`; `vgpu-operator` alone is the program, `helm install vgpu-operator x` and\n"
        "`image: ghcr.io/vgpu-operator/vgpu-operator:0.1.0` are no command, and\n"
        "`kubectl get vnp -o yaml | vgpu-operator validat -f -` is a bad one.\n\n"
        "```console\n$ vgpu-operator crds -o toml\nvgpu-operator crds -o xml: not a command\n```\n",
    )
    problems = command_problems(page, tmp_path)
    assert [p.split(": ", 1)[0] for p in problems] == [
        "docs/page.md:5",
        "docs/page.md:6",
        "docs/page.md:7",
        "docs/page.md:8",
        "docs/page.md:17",
        "docs/page.md:18",
        "docs/page.md:21",
        "docs/page.md:24",
    ], problems
    assert "unrecognized arguments: --no-such-flag" in problems[0]
    assert "invalid choice: 'xml'" in problems[1]
    assert "invalid choice: 'gett'" in problems[2]
    assert "invalid float value: 'soon'" in problems[3]
    assert "invalid choice: 'valid8'" in problems[4]
    assert "unknown doctor rule(s): no-such-rule" in problems[5]
    assert "invalid choice: 'validat'" in problems[6]
    assert "invalid choice: 'toml'" in problems[7]


def test_broken_quoting_in_a_command_is_reported(tmp_path: Path) -> None:
    page = synthetic(tmp_path, "# Page\n\n```\nvgpu-operator plan -f 'policy.yaml\n```\n")
    [problem] = command_problems(page, tmp_path)
    assert "cannot be split" in problem


def test_commands_are_found_where_a_shell_would_run_them() -> None:
    found = list(
        shell_commands(
            "(cd x && vgpu-operator crds -o json) | kubectl-vgpu doctor; echo vgpu-operator run\n"
            "kubectl -n vgpu-system logs deploy/vgpu-operator   # kubectl itself"
        )
    )
    assert found == [("vgpu-operator", ["crds", "-o", "json"]), ("kubectl vgpu", ["doctor"])]
