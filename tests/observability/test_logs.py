"""Log formatting: JSON lines off a terminal, readable lines on one, fields kept apart."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from corral.observability.logs import fields, setup_logging


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def test_json_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    setup_logging("INFO", stream)
    log = logging.getLogger("corral.test")
    log.info("turn closed: %s", "end_turn", extra=fields(kind="turn", session_id="sesn_1"))
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    logging.getLogger("httpx").info("HTTP Request: GET https://example.com")
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["msg"] == "turn closed: end_turn"
    assert (first["level"], first["logger"]) == ("info", "corral.test")
    assert (first["kind"], first["session_id"]) == ("turn", "sesn_1")
    assert second["level"] == "error" and "ValueError: boom" in second["exc"]


def test_readable_lines_on_a_terminal() -> None:
    stream = Terminal()
    setup_logging("INFO", stream)
    logging.getLogger("corral.http").info("GET /health 200", extra=fields(status=200))
    (line,) = stream.getvalue().splitlines()
    assert line.endswith("INFO corral.http GET /health 200 status=200")
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)
