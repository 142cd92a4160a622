"""`corral demo` end to end: embedded server, SDK client, scripted model, real sandbox.

One run plays both acts; then a server started on the data the demo left behind shows,
through the SDK, that the second act really happened on the server: the coordinator's child
threads, their replies on its log, the lessons saved to memory by its session, and the later
session reading them back.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.server import ServerProcess


@pytest.fixture(scope="module")
def played(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run `corral demo` once, keeping its data directory."""
    cwd = tmp_path_factory.mktemp("demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["CORRAL_CONFIG"] = os.devnull  # no config file
    done = subprocess.run(
        [sys.executable, "-m", "corral", "demo", "--data-dir", str(cwd / "data")],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return cwd, done


@pytest.fixture(scope="module")
def client(played: tuple[Path, Any]) -> Iterator[anthropic.Anthropic]:
    """The SDK against a server on the demo's own server data."""
    server = ServerProcess(played[0] / "data" / "server").start()
    try:
        yield server.client()
    finally:
        server.stop()


def test_demo_command_solves_the_incident_offline(played: tuple[Path, Any]) -> None:
    cwd, done = played
    assert "solved" in done.stdout and "scripted" in done.stdout
    # the story is the output: the embedded server's info records go to a file, not between
    # the story's lines (stderr keeps warnings only)
    assert "HTTP Request:" not in done.stderr
    assert '"level": "info"' not in done.stdout + done.stderr
    server_log = (cwd / "corral-demo-outputs" / "server.log").read_text()
    assert '"msg": "turn closed: end_turn"' in server_log
    assert '"logger": "corral.http"' not in server_log
    report = (cwd / "corral-demo-outputs" / "postmortem.md").read_text()
    assert "a3f9c21" in report and "c81d4e7" in report


def test_the_second_act_is_printed_as_scripted(played: tuple[Path, Any]) -> None:
    out = played[1].stdout
    assert "Act 2: the post-mortem follow-up (scripted demo model)" in out
    assert "🧵 thread log-analyst started" in out and "🧵 thread diff-reviewer started" in out
    assert "diff-reviewer's custom tool, answered here" in out
    assert "📬 reply   log-analyst:" in out and "📬 reply   diff-reviewer:" in out
    assert "🧠 memory created /incidents/INC-2275-INC-2277.md" in out and "session_actor" in out
    assert re.search(r"Act 2 summary, 2 child threads \(scripted demo model\): done", out)


def _sessions(client: anthropic.Anthropic) -> dict[str, Any]:
    return {s.title: s for s in client.beta.sessions.list()}


def _text(event: Any) -> str:
    return "".join(getattr(b, "text", "") or "" for b in event.content or [])


def test_the_coordinator_ran_two_threads_that_replied(client: anthropic.Anthropic) -> None:
    lead = _sessions(client)["Post-mortem follow-up"]
    threads = list(client.beta.sessions.threads.list(lead.id))
    names = [getattr(t.agent, "name", None) for t in threads]
    assert names[0] == "postmortem-lead" and sorted(names[1:]) == ["diff-reviewer", "log-analyst"]
    children = {t.id: getattr(t.agent, "name", None) for t in threads[1:]}
    assert all(t.parent_thread_id == threads[0].id for t in threads[1:])
    log = list(client.beta.sessions.events.list(lead.id, limit=100))
    tasks = [e for e in log if e.type == "agent.thread_message_sent"]
    assert {e.to_session_thread_id for e in tasks} == set(children)
    assert all("a3f9c21" in _text(e) and "c81d4e7" in _text(e) for e in tasks)
    replies = [e for e in log if e.type == "agent.thread_message_received"]
    assert {(e.from_session_thread_id, e.from_agent_name) for e in replies} == set(children.items())
    assert all("- Lesson:" in _text(e) for e in replies)
    # the reviewer's get_diff calls reached this client on the session and were routed back
    reviewer = next(t for t, name in children.items() if name == "diff-reviewer")
    own = list(client.beta.sessions.threads.events.list(reviewer, session_id=lead.id))
    answers = [e for e in own if e.type == "user.custom_tool_result"]
    assert len(answers) == 2 and not any(e.is_error for e in answers)


def test_lessons_saved_by_the_session_are_read_by_a_later_one(
    client: anthropic.Anthropic,
) -> None:
    sessions = _sessions(client)
    lead, later = sessions["Post-mortem follow-up"], sessions["Before tonight's release"]
    stores = client.beta.memory_stores
    store = next(s for s in stores.list() if s.name == "Acme SRE lessons")
    versions = list(stores.memory_versions.list(store.id))
    assert [(v.operation, v.path) for v in versions] == [
        ("created", "/incidents/INC-2275-INC-2277.md")
    ]
    actor = versions[0].created_by
    assert actor is not None and actor.type == "session_actor"
    assert getattr(actor, "session_id", None) == lead.id
    memory = stores.memories.retrieve(versions[0].memory_id, memory_store_id=store.id)
    lessons = [line for line in (memory.content or "").splitlines() if line.startswith("- Lesson:")]
    assert len(lessons) == 4
    results = [
        _text(e)
        for e in client.beta.sessions.events.list(later.id, limit=100)
        if e.type == "agent.tool_result"
    ]
    assert any(all(lesson in text for lesson in lessons) for text in results)
    answer = list(client.beta.sessions.events.list(later.id, limit=100))
    final = _text(next(e for e in reversed(answer) if e.type == "agent.message"))
    assert final.startswith("[corral-scripted]") and lessons[0] in final
