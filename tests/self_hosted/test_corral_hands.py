"""`corral hands`, Corral's own worker, serving self-hosted sessions on a real server in real
bubblewrap sandboxes; SIGKILLed and SIGSTOPped for real.

Work leases are 3 s here (conftest) so lost workers are noticed quickly.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import anthropic

from tests.api.helpers import events, say
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, ToolUse, Turn
from tests.self_hosted.conftest import WORK_TTL, PatientServer
from tests.self_hosted.support import (
    TOOLSET,
    HandsProcess,
    cli,
    create_key,
    results_for,
    self_hosted_env,
    text_of,
    wait_until,
)
from tests.server import ServerProcess, backend_env

LOST = "interrupted: the outcome is unknown"
SKILL_MD = b"---\nname: greeter\ndescription: Says hello.\n---\nSay hello politely.\n"


def _agent(client: anthropic.Anthropic, **extra: Any) -> str:
    return client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="corral-hands",
        tools=[TOOLSET],  # type: ignore[list-item]
        **extra,
    ).id


def _workspace(root: Path, session_id: str) -> Path:
    return root / "sessions" / session_id / "workspace"


def _end_of_turn(client: anthropic.Anthropic, session_id: str, after: int = 0) -> None:
    wait_until(
        client,
        session_id,
        lambda e: (
            e.type == "session.status_idle"
            and e.stop_reason.type == "end_turn"
            and len(events(client, session_id)) > after
        ),
        timeout=120,
        what="the end of the turn",
    )


def test_corral_hands_serves_bash_write_with_confirmation_read_skills_and_memory(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    client = server.client()
    env_id = self_hosted_env(client)
    key = create_key(server, env_id)
    skill = client.beta.skills.create(files=[("greeter/SKILL.md", SKILL_MD, "text/markdown")])
    store = client.beta.memory_stores.create(name="notes")
    client.beta.memory_stores.memories.create(store.id, path="/seen.md", content="from the api")
    fake_model.reset(
        ScriptedTurns(
            [
                Turn([ToolUse("bash", {"command": "echo hi from $((40 + 2)) in $(pwd)"})]),
                Turn([ToolUse("write", {"file_path": "notes.txt", "content": "remote hands"})]),
                Turn([ToolUse("read", {"file_path": "notes.txt"})]),
                Turn([ToolUse("bash", {"command": "cat /mnt/skills/greeter/SKILL.md"})]),
                Turn(
                    [
                        ToolUse(
                            "bash",
                            {
                                "command": "cat /mnt/memory/notes/seen.md; "
                                "echo learned > /mnt/memory/notes/new.md"
                            },
                        )
                    ]
                ),  # fmt: skip
                Turn([Text("done")]),
            ],
            repeat_last=True,
        )
    )
    workdir = tmp_path / "hands"
    worker = HandsProcess(server, env_id, key, workdir)
    try:
        session = client.beta.sessions.create(
            agent=_agent(client, skills=[{"type": "custom", "skill_id": skill.id}]),
            environment_id=env_id,
            resources=[{"type": "memory_store", "memory_store_id": store.id}],
        )
        say(client, session.id, "go")
        write = wait_until(
            client,
            session.id,
            lambda e: e.type == "agent.tool_use" and e.name == "write",
            timeout=120,
            what="the write call",
        )
        assert write.evaluated_permission == "ask"
        wait_until(
            client,
            session.id,
            lambda e: (
                e.type == "session.status_idle"
                and e.stop_reason.type == "requires_action"
                and write.id in e.stop_reason.event_ids
            ),
            what="requires_action naming the write",
        )
        notes = _workspace(workdir, session.id) / "notes.txt"
        assert not notes.exists(), "ran before it was confirmed"
        client.beta.sessions.events.send(
            session.id,
            events=[{"type": "user.tool_confirmation", "tool_use_id": write.id, "result": "allow"}],
        )
        _end_of_turn(client, session.id)
        log = events(client, session.id)
        uses = [e for e in log if e.type == "agent.tool_use"]
        assert [u.name for u in uses] == ["bash", "write", "read", "bash", "bash"]
        answers = [results_for(log, u.id) for u in uses]
        assert all(len(a) == 1 and a[0].type == "user.tool_result" for a in answers), answers
        assert "hi from 42 in /workspace" in text_of(answers[0][0])  # in the sandbox
        assert "remote hands" in text_of(answers[2][0])
        assert "Say hello politely." in text_of(answers[3][0])
        assert "from the api" in text_of(answers[4][0])
        assert not any(a[0].is_error for a in answers), [text_of(a[0]) for a in answers]
        assert notes.read_text() == "remote hands"  # on the worker's machine
        saved = client.beta.memory_stores.memories.list(store.id, view="full")
        assert {m.path: m.content for m in saved if m.type == "memory"} == {
            "/seen.md": "from the api",
            "/new.md": "learned\n",
        }
        assert not [e for e in log if e.type.startswith("corral.")]
    finally:
        worker.stop()


def test_killed_corral_hands_loses_only_its_call_and_the_next_worker_resumes(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    client = server.client()
    env_id = self_hosted_env(client)
    key = create_key(server, env_id)
    fake_model.reset(
        ScriptedTurns(
            [
                Turn([ToolUse("bash", {"command": "echo ran >> first.txt; sleep 60"})]),
                Turn([Text("the worker died")]),
                Turn([ToolUse("bash", {"command": "echo ran >> second.txt"})]),
                Turn([Text("done")]),
            ],
            repeat_last=True,
        )
    )
    first = HandsProcess(server, env_id, key, tmp_path / "w1")
    second: HandsProcess | None = None
    try:
        session = client.beta.sessions.create(agent=_agent(client), environment_id=env_id)
        say(client, session.id, "start")
        first_marker = _workspace(tmp_path / "w1", session.id) / "first.txt"
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
        _end_of_turn(client, session.id)
        # Another machine: an empty workdir. The next input queues an item it picks up.
        second = HandsProcess(server, env_id, key, tmp_path / "w2")
        before = len(events(client, session.id))
        say(client, session.id, "again")
        wait_until(
            client,
            session.id,
            lambda e: e.type == "agent.message" and "done" in text_of(e),
            timeout=120,
            what="the second turn's end",
        )
        log = events(client, session.id)
        assert len(log) > before
        uses = [e for e in log if e.type == "agent.tool_use"]
        assert len(uses) == 2
        assert all(len(results_for(log, u.id)) == 1 for u in uses)
        assert first_marker.read_text() == "ran\n"  # nothing ran twice
        assert (_workspace(tmp_path / "w2", session.id) / "second.txt").read_text() == "ran\n"
        assert not (_workspace(tmp_path / "w2", session.id) / "first.txt").exists()
        assert second.executed() == 1
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_corral_hands_paused_past_its_lease_is_refused_when_it_comes_back(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    client = server.client()
    env_id = self_hosted_env(client)
    key = create_key(server, env_id)
    fake_model.reset(
        ScriptedTurns(
            [
                Turn([ToolUse("bash", {"command": "echo ran >> paused.txt; sleep 2"})]),
                Turn([Text("ok")]),
            ],
            repeat_last=True,
        )
    )
    worker = HandsProcess(server, env_id, key, tmp_path / "w")
    try:
        session = client.beta.sessions.create(agent=_agent(client), environment_id=env_id)
        say(client, session.id, "start")
        marker = _workspace(tmp_path / "w", session.id) / "paused.txt"
        _wait_for_file(marker)
        worker.signal(signal.SIGSTOP)
        use = next(e for e in events(client, session.id) if e.type == "agent.tool_use")
        answer = wait_until(
            client,
            session.id,
            lambda e: e.type == "user.tool_result" and e.tool_use_id == use.id,
            timeout=WORK_TTL + 30,
            what="the paused call's error result",
        )
        assert answer.is_error and LOST in text_of(answer)
        worker.signal(signal.SIGCONT)
        deadline = time.monotonic() + 60
        while "lease lost (412)" not in worker.log():
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.1)
        _end_of_turn(client, session.id)
        log = events(client, session.id)
        assert len(results_for(log, use.id)) == 1  # the late result never landed
        assert marker.read_text() == "ran\n"
    finally:
        worker.signal(signal.SIGCONT)
        worker.stop()


def _wait_for_file(path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_a_brain_crash_never_loses_the_workers_sandbox(
    tmp_path: Path, fake_model: FakeModelServer, backend: str
) -> None:
    """The server is SIGKILLed and restarted between two calls of one session: the worker
    keeps its lease (a long ttl here) and its sandbox, and runs the next call in it."""
    fake_model.reset(
        ScriptedTurns(
            [
                Turn([ToolUse("bash", {"command": "echo kept > /tmp/proof; echo first"})]),
                Turn([Text("first done")]),
                Turn([ToolUse("bash", {"command": "cat /tmp/proof"})]),
                Turn([Text("second done")]),
            ],
            repeat_last=True,
        )
    )
    with backend_env(backend) as env:
        server = PatientServer(
            tmp_path / "server",
            model_url=fake_model.url,
            env={**env, "CORRAL_WORK_TTL_SECONDS": "120"},
        ).start()
        worker: HandsProcess | None = None
        try:
            client = server.client()
            env_id = self_hosted_env(client)
            key = create_key(server, env_id)
            # idle long enough to outlast the restart: leaving would be legitimate, not a loss
            worker = HandsProcess(server, env_id, key, tmp_path / "w", max_idle=600)
            session = client.beta.sessions.create(agent=_agent(client), environment_id=env_id)
            say(client, session.id, "first")
            _end_of_turn(client, session.id)
            server.restart()  # SIGKILL: every brain of that process dies with it
            client = server.client()
            before = len(events(client, session.id))
            say(client, session.id, "second")
            wait_until(
                client,
                session.id,
                lambda e: e.type == "agent.message" and "second done" in text_of(e),
                timeout=180,
                what="the second turn's end",
            )
            log = events(client, session.id)[before:]
            result = next(e for e in log if e.type == "user.tool_result")
            assert not result.is_error and text_of(result).strip() == "kept", text_of(result)
            assert worker.log().count("serving session") == 1  # one item, one sandbox
            assert len(client.beta.environments.work.list(env_id).data) == 1
        finally:
            if worker is not None:
                worker.stop()
            server.stop()


def test_corral_hands_refuses_a_missing_or_revoked_key(
    server: ServerProcess, tmp_path: Path
) -> None:
    client = server.client()
    env_id = self_hosted_env(client)
    key = create_key(server, env_id)
    missing = cli(server, "hands", "--url", server.url, "--environment", env_id)
    assert missing.returncode == 2 and "CORRAL_ENVIRONMENT_KEY" in missing.stderr
    assert cli(server, "env-key", "revoke", key.split(".")[1]).returncode == 0
    revoked = HandsProcess(server, env_id, key, tmp_path / "w")
    try:
        assert revoked.proc.wait(timeout=240) == 1
        assert "revoked" in revoked.log() and "Traceback" not in revoked.log()
    finally:
        revoked.stop()
