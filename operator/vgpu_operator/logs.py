"""Logging for the controller and the agent: plain text or one JSON object per line.

Messages carry text from the cluster (ConfigMap contents, annotation values, apiserver
messages). Neither format lets that text forge a line or hide what it says: `json` escapes every
value (one object per line, non-ASCII and DEL escaped too, so no Unicode line separator gets
through), and `text` writes every control character as an escape (`\\n`, `\\x85`): C0 and DEL,
the C1 controls (NEL U+0085 is a line break to some log pipelines, U+009B a one-byte CSI to
terminals), the Unicode line and paragraph separators, and the bidirectional formatting
characters (U+202E would show a line reversed). Only a traceback keeps its line breaks.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
# C0, DEL and C1 controls; the Arabic letter mark, the left-to-right and right-to-left marks; the
# line and paragraph separators and the bidirectional embeddings and overrides (U+2028-U+202E);
# the bidirectional isolates (U+2066-U+2069); the byte order mark.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def escape(text: str) -> str:
    """Control characters (line breaks included) as Python-style escapes."""
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


def _escape_lines(text: str) -> str:
    return "\n".join(escape(line) for line in text.split("\n"))


class TextFormatter(logging.Formatter):
    """The usual `asctime level name message` line, the message escaped; a traceback keeps its
    line breaks, everything else in it escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return _escape_lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _escape_lines(super().formatStack(stack_info))


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...fields, "exception"}`, one per line."""

    def __init__(self, fields: dict[str, str] | None = None) -> None:
        super().__init__()
        self.fields = dict(fields or {})

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **self.fields,
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        # ensure_ascii escapes everything above U+007F; DEL is the one control JSON leaves be
        return json.dumps(out, ensure_ascii=True, default=str).replace("\x7f", "\\u007f")


def add_log_format(parser: argparse.ArgumentParser) -> None:
    """`--log-format`, the same for the controller and the agent."""
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text lines, or one JSON object per line (values escaped in both)",
    )


def setup(
    fmt: LogFormat,
    *,
    level: int = logging.INFO,
    text_format: str = "%(asctime)s %(levelname)s %(name)s %(message)s",
    fields: dict[str, str] | None = None,
) -> None:
    """Configure the root logger once for a command (replacing what `basicConfig` would do)."""
    handler = logging.StreamHandler(sys.stderr)
    formatter: logging.Formatter = (
        JsonFormatter(fields) if fmt == "json" else TextFormatter(text_format)
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
