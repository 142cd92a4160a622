"""SIGTERM mid-turn, with real processes and real signals (docs/deploy.md, "Stopping and
restarting"): a stopping `corral worker` lets its running tool call finish, logs the result
and hands the session over, so another worker finishes the turn at once (not a lease later);
a stopping `corral serve` ends its SSE streams cleanly and the restarted server finishes the
turn with nothing re-run; a second SIGTERM, or the grace running out, kills at once.

The model's bash call waits for a file the test creates, so the test decides when the tool
call finishes: it is always mid-call when the signal arrives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.api.test_sandbox_follows_session import toolset_session
from tests.fakes.messages_server import ErrorReply, FakeModelServer, Text, ToolUse, Turn
from tests.server import (
    DATABASE_URL_ENV,
    ServerProcess,
    free_port,
    fresh_postgres,
    start_worker,
    stop_worker,
)

pytestmark = pytest.mark.slow

# Says it started, blocks until the test creates /workspace/go, then leaves one line in
# /workspace/runs per run.
COMMAND = (
    "touch /workspace/started; while [ ! -e /workspace/go ]; do sleep 0.05; done; "
    "echo ran >> /workspace/runs; echo ok"
)


def script() -> list[Turn]:
    """The model: one bash call, then a closing message."""
    return [Turn([ToolUse("bash", {"command": COMMAND})]), Turn([Text("done")])]


def workspace(data_dir: Path, session_id: str) -> Path:
    return data_dir / "sessions" / session_id / "workspace"


def release_tool_call(data_dir: Path, session_id: str) -> None:
    """Let the waiting bash call finish."""
    (workspace(data_dir, session_id) / "go").touch()


def wait_for(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def tool_call_running(client: anthropic.Anthropic, session_id: str) -> bool:
    """The bash call is logged and its sandbox runs it (it waits for the go file)."""
    return any(e.type == "agent.tool_use" for e in events(client, session_id))


def start_turn(client: anthropic.Anthropic, data_dir: Path) -> str:
    """A session whose turn is blocked in its bash call; returns its id."""
    session_id = toolset_session(client)
    say(client, session_id, "run it")
    wait_for(lambda: tool_call_running(client, session_id), "the bash call never started")
    started = workspace(data_dir, session_id) / "started"
    wait_for(started.exists, "the sandbox never ran the bash call")
    return session_id


def assert_finished_once(
    client: anthropic.Anthropic, requests: int, data_dir: Path, session_id: str
) -> None:
    """The turn ended, its tool call ran once and reported success, the model was asked
    exactly twice (`requests`: nothing re-run, no "interrupted" result to answer)."""
    log = events(client, session_id)
    results = [e for e in log if e.type == "agent.tool_result"]
    assert len(results) == 1, [e.type for e in log]
    assert not results[0].is_error, results[0].content
    assert results[0].content[0].text.strip() == "ok"
    assert (workspace(data_dir, session_id) / "runs").read_text() == "ran\n"
    assert requests == 2, "the model was asked again"
    assert [e.type for e in log].count("session.error") == 0


def wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> float:
    """Wait for `proc` to exit; returns when (monotonic)."""
    proc.wait(timeout=timeout)
    return time.monotonic()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    if not os.environ.get(DATABASE_URL_ENV):
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    with fresh_postgres("corral_stop") as url:
        yield url


def wait_worker_ready(port: int) -> None:
    """The worker's /metrics answers once its runtime (and scheduler) runs."""

    def answers() -> bool:
        try:
            httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=1)
        except httpx.HTTPError:
            return False
        return True

    wait_for(answers, "the second worker never started", timeout=180)


@pytest.mark.postgres
def test_sigterm_to_a_worker_mid_tool_call_hands_the_session_over(
    tmp_path: Path, postgres_url: str
) -> None:
    """Each worker has its own model server, so the test knows which one answered what."""
    data = tmp_path / "data"
    first_turn, last_turn = script()
    with FakeModelServer([first_turn]) as fake, FakeModelServer([last_turn]) as other_fake:
        server = ServerProcess(
            data, model_url=fake.url, args=("--database-url", postgres_url, "--workers", "0")
        ).start()
        first = start_worker(data, postgres_url, fake.url, log_name="first.log")
        second: subprocess.Popen[bytes] | None = None
        session_id = ""
        try:
            client = server.client()
            session_id = start_turn(client, data)  # the only worker yet runs it
            port = free_port()
            second = start_worker(
                data,
                postgres_url,
                other_fake.url,
                args=("--metrics-port", str(port)),
                log_name="second.log",
            )
            wait_worker_ready(port)
            first.send_signal(signal.SIGTERM)
            time.sleep(1.0)  # draining: the tool call is still running
            release_tool_call(data, session_id)
            exited = wait_exit(first, timeout=20)
            wait_idle(client, session_id, stop="end_turn", timeout=30)
            taken_over_in = time.monotonic() - exited
            print(f"turn finished {taken_over_in:.2f} s after the stopped worker exited")
            assert taken_over_in < 2.0, f"the other worker finished {taken_over_in:.1f} s later"
            requests = len(fake.requests) + len(other_fake.requests)
            assert_finished_once(client, requests, data, session_id)
            assert len(other_fake.requests) == 1, "the other worker did not finish the turn"
            assert first.returncode == 0, (data / "first.log").read_text()[-3000:]
        finally:
            if session_id:
                release_tool_call(data, session_id)
            stop_worker(first)
            if second is not None:
                stop_worker(second)
            server.stop()


@dataclass
class StreamWatch:
    """An SDK stream read in a thread until it ends; how it ended."""

    client: anthropic.Anthropic
    session_id: str
    types: list[str] = field(default_factory=list)
    error: BaseException | None = None
    ended_at: float | None = None
    opened: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            with self.client.beta.sessions.events.stream(self.session_id) as stream:
                self.opened.set()
                for event in stream:
                    self.types.append(event.type)
        except BaseException as exc:  # what the client would see
            self.error = exc
        finally:
            self.ended_at = time.monotonic()
            self.opened.set()


@contextmanager
def watched_stream(client: anthropic.Anthropic, session_id: str) -> Iterator[StreamWatch]:
    watch = StreamWatch(client, session_id)
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    assert watch.opened.wait(30), "the stream never opened"
    yield watch
    thread.join(timeout=30)


@pytest.mark.parametrize("how", ["sigterm", "ctrl_c"])
def test_sigterm_to_serve_ends_streams_cleanly_and_the_restart_finishes_the_turn(
    tmp_path: Path, how: str
) -> None:
    """`ctrl_c`: SIGINT to the server's whole process group, as a terminal sends it."""
    data = tmp_path / "data"
    with FakeModelServer(script()) as fake:
        server = ServerProcess(data, model_url=fake.url).start()
        session_id = ""
        try:
            client = server.client(timeout=60)
            session_id = start_turn(client, data)
            with watched_stream(client, session_id) as watch:
                signalled = time.monotonic()
                assert server.proc is not None
                if how == "ctrl_c":
                    os.killpg(server.proc.pid, signal.SIGINT)
                else:
                    server.proc.send_signal(signal.SIGTERM)
                wait_for(lambda: watch.ended_at is not None, "the stream did not end", 10)
            assert watch.error is None, f"the stream broke: {watch.error!r}"
            assert watch.ended_at is not None and watch.ended_at - signalled < 5
            release_tool_call(data, session_id)
            exited = wait_exit(server.proc, timeout=25)
            ended, exit_after = watch.ended_at - signalled, exited - signalled
            print(f"stream ended after {ended:.2f} s, exit after {exit_after:.2f} s")
            assert exited - signalled < 20, "the server did not exit within the grace"
            assert server.proc.returncode == 0, server.log_path.read_text()[-3000:]
            server.proc = None
            server.start()
            client = server.client()
            wait_idle(client, session_id, stop="end_turn", timeout=30)
            assert_finished_once(client, len(fake.requests), data, session_id)
        finally:
            if session_id:
                release_tool_call(data, session_id)
            server.stop()


@pytest.mark.parametrize("how", ["second_sigterm", "grace_runs_out"])
def test_a_second_sigterm_or_the_grace_running_out_kills_at_once(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    grace = 3.0 if how == "grace_runs_out" else 60.0
    with FakeModelServer(script()) as fake:
        server = ServerProcess(
            data, model_url=fake.url, env={"CORRAL_SHUTDOWN_GRACE_SECONDS": str(grace)}
        ).start()
        session_id = ""
        try:
            client = server.client()
            session_id = start_turn(client, data)  # never released: it would drain forever
            proc = server.proc
            assert proc is not None
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            time.sleep(1.5)
            assert proc.poll() is None, "the server did not drain: it exited at once"
            if how == "second_sigterm":
                proc.send_signal(signal.SIGTERM)
                signalled = time.monotonic()
                grace = 0.0
            exited = wait_exit(proc, timeout=grace + 10)
            assert proc.returncode == -signal.SIGTERM
            assert exited - signalled < grace + 2.0, f"took {exited - signalled:.1f} s"
        finally:
            if session_id:
                release_tool_call(data, session_id)
            server.kill()


def test_sigterm_during_a_model_retry_wait_hands_over_at_once(tmp_path: Path) -> None:
    """A brain waiting out the provider's `retry-after` has done nothing yet: it hands the
    session over at once instead of holding the stop for the grace."""
    data = tmp_path / "data"
    limited = ErrorReply(status=429, headers={"retry-after": "60"})
    with FakeModelServer([limited, Turn([Text("done")])]) as fake:
        server = ServerProcess(data, model_url=fake.url).start()
        try:
            client = server.client()
            session_id = toolset_session(client)
            say(client, session_id, "hello")

            def rescheduled() -> bool:
                types = {e.type for e in events(client, session_id)}
                return "session.status_rescheduled" in types

            wait_for(rescheduled, "the model call was never rescheduled")
            assert server.proc is not None
            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            exited = wait_exit(server.proc, timeout=30)
            assert exited - signalled < 5, f"exit took {exited - signalled:.1f} s"
            assert server.proc.returncode == 0
            server.proc = None
            server.start()
            wait_idle(server.client(), session_id, stop="end_turn", timeout=30)
            assert len(fake.requests) == 2
        finally:
            server.stop()
