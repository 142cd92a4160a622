"""The scale benchmark's model: the wire fake in its own process (so it does not share the
load generator's GIL), answering every session the same multi-step turn.

Run: `python bench/_scale_fake.py --port P --delay 0.05 [--bash]`. Stateless: each reply is
a function of the request's position (turn, step), like the chaos model. No timing here.
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _util
from _chaos_model import bash_command, position
from _fake import _wait_port
from tests.fakes.messages_server import ErrorReply, FakeModelServer, Reply, Text, ToolUse, Turn
from tests.server import free_port

TEXT = "Checking the runbook and the deploy log before answering. "


def turn_plan(marker: str, turn: int, delay: float, bash: bool) -> list[Turn]:
    """text + custom tool, text + (bash | custom tool), final text."""
    mark = f"{marker}.t{turn}"
    second = (
        ToolUse("bash", {"command": bash_command(f"{mark}.s1.b", False)})
        if bash
        else ToolUse("lookup", {"key": f"{mark}.s1.c"})
    )
    return [
        Turn([Text(TEXT), ToolUse("lookup", {"key": f"{mark}.s0.c"})], first_token_delay=delay),
        Turn([Text(TEXT), second], first_token_delay=delay),
        Turn([Text(TEXT + "Done.")], first_token_delay=delay),
    ]


def handler(delay: float, bash: bool) -> Any:
    """The fake's handler for `delay` seconds to first token."""

    def handle(request: dict[str, Any]) -> Reply:
        where = position(request)
        if where is None:
            return ErrorReply(status=400, message="scale fake: no [marker turn=N] tag")
        marker, turn, step = where
        steps = turn_plan(marker, turn, delay, bash)
        return steps[min(step, len(steps) - 1)]

    return handle


@contextlib.contextmanager
def scale_fake(delay: float, bash: bool, folder: Path) -> Iterator[str]:
    """This module as a child process; yields its URL."""
    port = free_port()
    args = [sys.executable, __file__, "--port", str(port), "--delay", str(delay)]
    with (folder / "fake.log").open("wb") as log:
        proc = subprocess.Popen(
            [*args, *(["--bash"] if bash else [])],
            cwd=_util.ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_port(port, proc)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--bash", action="store_true")
    args = parser.parse_args()
    fake = FakeModelServer(handler(args.delay, args.bash), port=args.port)
    with fake, contextlib.suppress(KeyboardInterrupt):
        threading.Event().wait()


if __name__ == "__main__":
    main()
