"""Regressions of the brain issue, through the official SDK against a real server:

1. an interrupt stops the rest of a batch of tool calls;
2. a call confirmed before the brain asked for it, then cut short by a crash, never runs again;
5. the work of a step grows with what is new, not with the length of the log (counted with
   the brains' work counters in /v1/admin/status, not timed).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.helpers import assert_log_sound, events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, ToolUse, Turn
from tests.server import API_KEY, ServerProcess, backend_env

BASH = {"type": "agent_toolset_20260401"}
BASH_ASKS = {
    "type": "agent_toolset_20260401",
    "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
}


def workspace(server: ServerProcess, session_id: str) -> Path:
    """The session's /workspace on the host."""
    return server.data_dir / "sessions" / session_id / "workspace"


def wait_until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def assert_results_unique(log: list[Any]) -> None:
    """Unique event ids; every tool use has at most one result (confirmations aside)."""
    assert len({e.id for e in log}) == len(log), "duplicate event ids"
    answered = [
        getattr(e, "tool_use_id", None) or e.custom_tool_use_id
        for e in log
        if e.type in ("agent.tool_result", "user.custom_tool_result")
    ]
    assert len(answered) == len(set(answered)), answered


def result_texts(log: list[Any]) -> list[str]:
    return [
        " ".join(b.text for b in e.content if b.type == "text")
        for e in log
        if e.type == "agent.tool_result"
    ]


# ---- hole 1 ---------------------------------------------------------------------------------


def test_interrupt_stops_the_rest_of_a_batch(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    first = "touch /workspace/first-started; sleep 30; echo done first"
    second = "touch /workspace/second-ran; echo done second"
    fake_model.reset(
        [
            Turn([ToolUse("bash", {"command": first}), ToolUse("bash", {"command": second})]),
            Turn([Text("must not be asked")]),
        ]
    )
    client = server.client()
    session_id, _ = make_session(client, tools=[BASH])
    say(client, session_id, "two commands")
    started = workspace(server, session_id) / "first-started"
    wait_until(started.exists, "the first command to start")
    served = len(fake_model.requests)
    client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    assert_log_sound(log)
    assert not (workspace(server, session_id) / "second-ran").exists(), "ran after interrupt"
    assert not any("done" in text for text in result_texts(log))
    assert len(fake_model.requests) == served, "the model was called after the interrupt"
    assert log[-1].type == "session.status_idle" and log[-1].stop_reason.type == "end_turn"


# ---- hole 2 ---------------------------------------------------------------------------------


@pytest.fixture
def crashy(tmp_path: Path, fake_model: FakeModelServer, backend: str) -> Iterator[ServerProcess]:
    """A server with a short lease, so a restart on PostgreSQL takes seconds. Not shorter: a
    server starved of CPU on a busy test machine can miss a 2 s renewal, and a brain that
    loses its lease mid-stream asks the model again, overrunning the scripted turns."""
    with backend_env(backend) as env:
        lease = {"CORRAL_LEASE_SECONDS": "6"}
        proc = ServerProcess(tmp_path / "data", model_url=fake_model.url, env={**env, **lease})
        proc.start()
        yield proc
        proc.stop()


def drain_fifo(path: Path, timeout: float = 60.0) -> bytes:
    """Read a FIFO until a writer has written and closed it (a read-side open never blocks)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:  # a writer is there but wrote nothing yet
                chunk = None
            if chunk:
                data += chunk
            elif chunk == b"" and data:
                return data  # the writer closed
            time.sleep(0.02)
    finally:
        os.close(fd)
    raise AssertionError("nobody wrote to the FIFO")


def test_call_confirmed_early_then_cut_by_a_crash_never_runs_again(
    crashy: ServerProcess, fake_model: FakeModelServer
) -> None:
    # The write goes to a FIFO, so the brain is held inside that allowed call until the test
    # reads it: the bash confirmation is then logged while the session is still running,
    # before any requires_action idle (the API accepts that), deterministically.
    effect = "echo ran >> /workspace/effect.txt"
    command = f"{effect}; [ $(wc -l < /workspace/effect.txt) -gt 1 ] || sleep 60"
    fake_model.reset(
        [
            Turn(
                [
                    ToolUse("write", {"file_path": "/workspace/gate", "content": "open"}),
                    ToolUse("bash", {"command": command}),
                ]
            ),
            Turn([Text("noted")]),
        ]
    )
    client = crashy.client()
    session_id, _ = make_session(client, tools=[BASH_ASKS])
    space = workspace(crashy, session_id)
    space.mkdir(parents=True, exist_ok=True)
    os.mkfifo(space / "gate", 0o666)
    os.chmod(space / "gate", 0o666)
    say(client, session_id, "write, then run")
    wait_until(
        lambda: any(
            e.type == "agent.tool_use" and e.name == "bash" for e in events(client, session_id)
        ),
        "the tool uses",
    )
    bash_use = next(
        e for e in events(client, session_id) if e.type == "agent.tool_use" and e.name == "bash"
    )
    assert client.beta.sessions.retrieve(session_id).status == "running"
    client.beta.sessions.events.send(
        session_id,
        events=[{"type": "user.tool_confirmation", "tool_use_id": bash_use.id, "result": "allow"}],
    )
    assert drain_fifo(space / "gate") == b"open"
    wait_until((space / "effect.txt").exists, "the confirmed command to run")
    crashy.restart()
    client = crashy.client()
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    assert_results_unique(log)
    assert (space / "effect.txt").read_text() == "ran\n", "the confirmed call ran twice"
    result = next(e for e in log if e.type == "agent.tool_result" and e.tool_use_id == bash_use.id)
    assert result.is_error and "outcome is unknown" in result.content[0].text


# ---- hole 5 ---------------------------------------------------------------------------------


def work(server: ServerProcess) -> dict[str, int]:
    """This server's brain work counters."""
    response = httpx.get(
        f"{server.url}/v1/admin/status", headers={"x-api-key": API_KEY}, timeout=10
    )
    response.raise_for_status()
    return dict(response.json()["brains"]["work"])


def one_turn_of_work(server: ServerProcess, client: Any, session_id: str) -> dict[str, int]:
    """Counter increments for one text-only turn on `session_id`."""
    after = len(events(client, session_id))
    before = work(server)
    say(client, session_id, "one more")
    wait_idle(client, session_id, stop="end_turn", after=after)
    later = work(server)
    return {key: later[key] - before[key] for key in before}


def grow(client: Any, session_id: str, batches: int) -> None:
    """Lengthen the log: each batch is 50 messages answered by one model turn."""
    message = {"type": "user.message", "content": [{"type": "text", "text": "filler"}]}
    for _ in range(batches):
        after = len(events(client, session_id))
        client.beta.sessions.events.send(session_id, events=[message] * 50)
        wait_idle(client, session_id, stop="end_turn", after=after)


def test_work_per_turn_does_not_grow_with_the_log(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset(ScriptedTurns([Turn([Text("ok")])], repeat_last=True))
    client = server.client()
    short, _ = make_session(client, tools=[])
    long, _ = make_session(client, tools=[])
    say(client, short, "hi")
    wait_idle(client, short, stop="end_turn")
    grow(client, long, batches=20)
    assert len(events(client, long)) > 1000
    on_short = one_turn_of_work(server, client, short)
    on_long = one_turn_of_work(server, client, long)
    assert on_long["events_applied"] == on_short["events_applied"] < 20
    assert on_long["blocks_built"] == on_short["blocks_built"] < 20
    assert on_long["steps"] == on_short["steps"]
    assert on_long["cold_folds"] == on_short["cold_folds"] == 0
