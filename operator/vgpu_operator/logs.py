"""Logging for the controller and the agent: plain text or one JSON object per line.

Messages carry text from the cluster (ConfigMap contents, annotation values, apiserver
messages). Neither format lets that text forge a line: `json` escapes every value (one object
per line, non-ASCII escaped too, so no Unicode line separator gets through), and `text` writes
the message's line breaks and other control characters as escapes (`\\n`); only a traceback
keeps its lines.
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
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def escape(text: str) -> str:
    """Control characters (line breaks included) as Python-style escapes."""
    return _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)


class TextFormatter(logging.Formatter):
    """The usual `asctime level name message` line, the message escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)


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
        return json.dumps(out, ensure_ascii=True, default=str)


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
