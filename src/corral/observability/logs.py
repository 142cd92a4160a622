"""Structured logs: JSON lines when stderr is not a terminal, readable lines when it is.

Structured fields travel in a record's `fields` extra (`log.info(msg, extra=fields(...))`).
Callers log names, ids, numbers and statuses only: never headers, keys or vault values.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

QUIET_LOGGERS = ("httpx", "httpcore", "httpx2", "httpcore2")
"""Libraries whose INFO lines (one per outgoing request) are noise in a server's log."""


def fields(**values: Any) -> dict[str, Any]:
    """The `extra` of a structured log call."""
    return {"fields": values}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, the record's fields, any exception."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            out.update({k: v for k, v in extra.items() if k not in out})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class HumanFormatter(logging.Formatter):
    """`time LEVEL logger message key=value ...` for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        """The record with its fields appended as key=value pairs."""
        line = super().format(record)
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict) and extra:
            pairs = " ".join(f"{k}={v}" for k, v in extra.items())
            head, sep, tail = line.partition("\n")  # keep a traceback below the fields
            line = f"{head} {pairs}{sep}{tail}"
        return line


def setup_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Configure the root logger once for a command: JSON unless `stream` is a terminal."""
    stream = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(stream)
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    handler.setFormatter(HumanFormatter() if is_tty else JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
