"""`corral serve` starts honestly (issue 18, "Honest startup"): it binds before it says it
listens, and refuses in one line, with no traceback, what cannot work."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.server import free_port
from tests.startup.support import assert_one_line_error, corral, healthy, started

LISTENING = "Corral listening on"


def test_taken_port_is_one_line_and_nothing_else_happens(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = corral(tmp_path, "serve", "--port", str(port))
    assert done.code == 1
    assert_one_line_error(done, f"127.0.0.1:{port}", "in use")
    assert len(done.lines) == 1, done.stderr
    assert LISTENING not in done.stderr
    assert not (tmp_path / ".corral").exists()  # refused before any file was made


def test_listening_is_announced_once_it_answers(tmp_path: Path) -> None:
    port = free_port()
    with started(tmp_path, "serve", "--port", str(port)) as server:
        log = server.wait_for(LISTENING)
        # no retry: the line is only true if the very first request is served
        assert healthy(f"http://127.0.0.1:{port}"), log
    line = next(line for line in log.splitlines() if LISTENING in line)
    assert f"http://127.0.0.1:{port}" in line
    # The README's first snippet uses a claude-* model: say at start that it cannot work.
    warnings = [line for line in log.splitlines() if "ANTHROPIC_API_KEY" in line]
    assert len(warnings) == 1 and '"warning"' in warnings[0], log
    assert "claude-*" in warnings[0]


def test_no_key_warning_when_the_key_is_set_or_claude_goes_elsewhere(tmp_path: Path) -> None:
    port = free_port()
    with started(
        tmp_path, "serve", "--port", str(port), env={"ANTHROPIC_API_KEY": "sk-set"}
    ) as server:
        log = server.wait_for(LISTENING)
    assert "is not set" not in log, log
    (tmp_path / "corral.toml").write_text(
        '[[models.routes]]\nmatch = "claude-*"\nprovider = "scripted"\n'
    )
    with started(tmp_path, "serve", "--port", str(free_port())) as server:
        log = server.wait_for(LISTENING)
    assert "is not set" not in log, log


def test_workers_0_on_sqlite_is_refused(tmp_path: Path) -> None:
    done = corral(tmp_path, "serve", "--port", str(free_port()), "--workers", "0", timeout=30)
    assert done.code == 2
    assert_one_line_error(done, "--workers 0", "SQLite", "corral worker")
    assert len(done.lines) == 1, done.stderr
    assert not (tmp_path / ".corral").exists()


def test_workers_0_env_on_sqlite_is_refused(tmp_path: Path) -> None:
    env = {"CORRAL_WORKERS": "0"}
    done = corral(tmp_path, "serve", "--port", str(free_port()), env=env, timeout=30)
    assert done.code == 2
    assert_one_line_error(done, "CORRAL_WORKERS", "SQLite")
