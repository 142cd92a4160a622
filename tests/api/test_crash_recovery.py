"""SIGKILL the server at the worst moments; the session must finish cleanly after restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.helpers import LOOKUP, assert_log_sound, events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import ServerProcess, short_lease_server

BASH = {"type": "agent_toolset_20260401"}
LEASE_SECONDS = 2.0
"""A short lease so that, on PostgreSQL (where a restarted process must wait out the dead
one's lease), recovery takes seconds, and waiting out a lease costs seconds too."""


@pytest.fixture
def crashy(tmp_path: Path, fake_model: FakeModelServer, backend: str) -> Iterator[ServerProcess]:
    with short_lease_server(tmp_path / "data", fake_model.url, backend, LEASE_SECONDS) as proc:
        yield proc


def wait_for(client: object, session_id: str, kind: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(e.type == kind for e in events(client, session_id)):  # type: ignore[arg-type]
            return
        time.sleep(0.02)
    raise AssertionError(f"no {kind}")


def assert_contiguous_and_finished(client: object, session_id: str) -> list[object]:
    log = events(client, session_id)  # type: ignore[arg-type]
    assert_log_sound(log)
    assert log[-1].type == "session.status_idle" and log[-1].stop_reason.type == "end_turn"
    return log


def test_kill_during_model_stream(crashy: ServerProcess, fake_model: FakeModelServer) -> None:
    fake_model.reset(
        [Turn([Text("never finished " * 50)], chunk_delay=0.05), Turn([Text("second try")])]
    )
    client = crashy.client()
    session_id, _ = make_session(client)
    say(client, session_id, "stream slowly")
    wait_for(client, session_id, "span.model_request_start")
    time.sleep(0.3)
    crashy.restart()
    client = crashy.client()
    wait_idle(client, session_id, stop="end_turn")
    log = assert_contiguous_and_finished(client, session_id)
    messages = [e for e in log if e.type == "agent.message"]  # type: ignore[attr-defined]
    assert [m.content[0].text for m in messages] == ["second try"]  # type: ignore[attr-defined]


def test_kill_after_tool_use_appended(crashy: ServerProcess, fake_model: FakeModelServer) -> None:
    command = "echo ran >> /workspace/side-effect.txt; sleep 60"
    fake_model.reset([Turn([ToolUse("bash", {"command": command})]), Turn([Text("noted")])])
    client = crashy.client()
    session_id, _ = make_session(client, tools=[BASH])
    say(client, session_id, "run it")
    wait_for(client, session_id, "agent.tool_use")
    effect = crashy.data_dir / "sessions" / session_id / "workspace" / "side-effect.txt"
    deadline = time.monotonic() + 20
    while not effect.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    crashy.restart()
    client = crashy.client()
    wait_idle(client, session_id, stop="end_turn")
    log = assert_contiguous_and_finished(client, session_id)
    result = next(e for e in log if e.type == "agent.tool_result")  # type: ignore[attr-defined]
    assert result.is_error and "interrupted" in result.content[0].text  # type: ignore[attr-defined]
    told = fake_model.requests[-1]["messages"][-1]["content"][0]
    assert told["type"] == "tool_result" and told["is_error"] is True
    assert effect.read_text() == "ran\n", "the side effect must not run twice"


def test_kill_while_waiting_for_custom_results(
    crashy: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset(
        [
            Turn([ToolUse("lookup", {"key": "a"}), ToolUse("lookup", {"key": "b"})]),
            Turn([Text("both answered")]),
        ]
    )
    client = crashy.client()
    session_id, _ = make_session(client, tools=[LOOKUP])
    say(client, session_id, "two lookups")
    idle = wait_idle(client, session_id, stop="requires_action")
    first, second = idle.stop_reason.event_ids
    client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": second,
                "content": [{"type": "text", "text": "B"}],
            }
        ],
    )
    crashy.restart()
    client = crashy.client()
    client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": first,
                "content": [{"type": "text", "text": "A"}],
            }
        ],
    )
    wait_idle(client, session_id, stop="end_turn")
    assert_contiguous_and_finished(client, session_id)
    results = fake_model.requests[-1]["messages"][-1]["content"]
    assert sorted(r["content"][0]["text"] for r in results) == ["A", "B"]


@pytest.mark.slow
def test_client_that_vanishes_is_waited_for(
    crashy: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset(
        [Turn([ToolUse("lookup", {"key": "incidents"})]), Turn([Text("three pages are open")])]
    )
    client = crashy.client()
    session_id, _ = make_session(client, tools=[LOOKUP])
    say(client, session_id, "how many pages?")
    idle = wait_idle(client, session_id, stop="requires_action")
    time.sleep(3 * LEASE_SECONDS)  # several leases: heartbeats and expiry have happened
    crashy.restart()
    client = crashy.client()
    time.sleep(3 * LEASE_SECONDS)
    session = client.beta.sessions.retrieve(session_id)
    assert session.status == "idle"
    last = events(client, session_id)[-1]
    assert last.type == "session.status_idle" and last.stop_reason.type == "requires_action"
    client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": idle.stop_reason.event_ids[0],
                "content": [{"type": "text", "text": "3"}],
            }
        ],
    )
    wait_idle(client, session_id, stop="end_turn")
    assert_contiguous_and_finished(client, session_id)
