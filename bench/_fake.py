"""The wire-level fake Messages API (tests/fakes/messages_server.py) in its own process, so
benchmark clients do not share its GIL. Loopback only; no timing here.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import _util
from tests.server import free_port


@contextlib.contextmanager
def fake_model(delay: float, text: str, folder: Path) -> Iterator[str]:
    """The wire-level fake in its own process (so it does not share our GIL); yields its URL."""
    script = folder / "fake_script.json"
    turn = {"blocks": [{"type": "text", "text": text}], "first_token_delay": delay}
    script.write_text(json.dumps([turn]))
    port = free_port()
    log = (folder / "fake.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.messages_server",
            "--port",
            str(port),
            "--script",
            str(script),
            "--repeat",
        ],
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
        log.close()


def _wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("fake model server exited early")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.05)
    raise RuntimeError("fake model server did not start")
