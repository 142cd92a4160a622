"""The SDK's own `EnvironmentWorker`, unchanged, serving self-hosted sessions on a real server.

Work leases are 3 s here (conftest) so lost workers are noticed quickly.
"""

from __future__ import annotations

import signal
from pathlib import Path

import anthropic
import pytest

from tests.api.helpers import events, say
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, ToolUse, Turn
from tests.self_hosted.support import (
    TOOLSET,
    WorkerProcess,
    create_key,
    results_for,
    self_hosted_env,
    text_of,
    wait_until,
)
from tests.server import ServerProcess

LOST = "interrupted: the outcome is unknown"


def _agent(client: anthropic.Anthropic) -> str:
    return client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="hands-anywhere",
        system="You help.",
        tools=[TOOLSET],  # type: ignore[list-item]
    ).id


def test_sdk_worker_serves_bash_write_with_confirmation_and_read(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    client = server.client()
    env_id = self_hosted_env(client)
    key = create_key(server, env_id)
    fake_model.reset(
        ScriptedTurns(
            [
                Turn([ToolUse("bash", {"command": "echo hi from $((40 + 2))"})]),
                Turn([ToolUse("write", {"file_path": "notes.txt", "content": "remote hands"})]),
                Turn([ToolUse("read", {"file_path": "notes.txt"})]),
                Turn([Text("done")]),
            ],
            repeat_last=True,
        )
    )
    worker = WorkerProcess(server, env_id, key, tmp_path / "work", WORKER_MAX_IDLE="2")
    try:
        session = client.beta.sessions.create(agent=_agent(client), environment_id=env_id)
        say(client, session.id, "go")
        write = wait_until(
            client,
            session.id,
            lambda e: e.type == "agent.tool_use" and e.name == "write",
            what="the write call",
        )
        assert write.evaluated_permission == "ask"
        idle = wait_until(
            client,
            session.id,
            lambda e: (
                e.type == "session.status_idle"
                and e.stop_reason.type == "requires_action"
                and write.id in e.stop_reason.event_ids
            ),
            what="requires_action naming the write",
        )
        assert idle is not None
        assert not list((tmp_path / "work").rglob("notes.txt")), "ran before it was confirmed"
        client.beta.sessions.events.send(
            session.id,
            events=[{"type": "user.tool_confirmation", "tool_use_id": write.id, "result": "allow"}],
        )
        wait_until(
            client,
            session.id,
            lambda e: e.type == "session.status_idle" and e.stop_reason.type == "end_turn",
            what="the end of the turn",
        )
        log = events(client, session.id)
        uses = [e for e in log if e.type == "agent.tool_use"]
        assert [u.name for u in uses] == ["bash", "write", "read"]
        answers = [results_for(log, u.id) for u in uses]
        assert all(len(a) == 1 and a[0].type == "user.tool_result" for a in answers), answers
        assert "hi from 42" in text_of(answers[0][0])
        assert "remote hands" in text_of(answers[2][0])
        assert [p.read_text() for p in (tmp_path / "work").rglob("notes.txt")] == ["remote hands"]
        assert not [e for e in log if e.type.startswith("corral.")]
    finally:
        worker.stop()


def test_killed_worker_loses_only_its_call_and_the_next_worker_resumes(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    client = server.client()
    env_id = self_hosted_env(client)
    key = create_key(server, env_id)
    first_marker, second_marker = tmp_path / "first.txt", tmp_path / "second.txt"
    fake_model.reset(
        ScriptedTurns(
            [
                Turn([ToolUse("bash", {"command": f"echo ran >> {first_marker}; sleep 60"})]),
                Turn([Text("the worker died")]),
                Turn([ToolUse("bash", {"command": f"echo ran >> {second_marker}"})]),
                Turn([Text("done")]),
            ],
            repeat_last=True,
        )
    )
    first = WorkerProcess(server, env_id, key, tmp_path / "w1")
    second: WorkerProcess | None = None
    try:
        session = client.beta.sessions.create(agent=_agent(client), environment_id=env_id)
        say(client, session.id, "start")
        wait_until(client, session.id, lambda e: e.type == "agent.tool_use", what="the call")
        _wait_for_file(first_marker)
        first.signal(signal.SIGKILL)
        first.stop()
        lost_use = next(e for e in events(client, session.id) if e.type == "agent.tool_use")
        answer = wait_until(
            client,
            session.id,
            lambda e: e.type == "user.tool_result" and e.tool_use_id == lost_use.id,
            what="the lost call's error result",
        )
        assert answer.is_error and LOST in text_of(answer)
        wait_until(
            client,
            session.id,
            lambda e: e.type == "agent.message",
            what="the model's answer to the lost call",
        )
        # A late result from the dead worker is refused: the call is answered.
        with pytest.raises(anthropic.ConflictError):
            client.beta.sessions.events.send(
                session.id,
                events=[
                    {
                        "type": "user.tool_result",
                        "tool_use_id": lost_use.id,
                        "content": [{"type": "text", "text": "late"}],
                    }
                ],
            )
        second = WorkerProcess(server, env_id, key, tmp_path / "w2")
        say(client, session.id, "again")
        wait_until(
            client,
            session.id,
            lambda e: e.type == "agent.message" and "done" in text_of(e),
            what="the second turn's end",
        )
        log = events(client, session.id)
        uses = [e for e in log if e.type == "agent.tool_use"]
        assert len(uses) == 2
        assert all(len(results_for(log, u.id)) == 1 for u in uses)
        assert first_marker.read_text() == "ran\n"  # nothing ran twice
        assert second_marker.read_text() == "ran\n"
    finally:
        first.stop()
        if second is not None:
            second.stop()


def _wait_for_file(path: Path, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)
