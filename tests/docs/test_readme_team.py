"""README's "A team with a memory, end to end" block, run as written: the official SDK against
a real server and sandboxes, with a fake model playing each agent by its system prompt.

If the README's calls stop matching the SDK or the server, this test fails, not a reader.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.fakes.messages_server import FakeModelServer, Reply, Text, ToolUse, Turn, by_system
from tests.fakes.model_script import first_user_text
from tests.server import ServerProcess

README = Path(__file__).resolve().parents[2] / "README.md"
LESSON = "- Lesson: a query per order inside the checkout loop (an N+1) exhausted the db pool."
NOTE = "/mnt/memory/team-notes/checkout.md"


def readme_block(heading: str) -> str:
    """The first python block after `heading` in README.md."""
    text = README.read_text()
    after = text[text.index(heading) :]
    found = re.search(r"```python\n(.*?)```", after, re.S)
    assert found is not None, f"no python block after {heading!r}"
    return found.group(1)


# ---- the fake model's agents (told apart by their system prompts) -------------------------


def _tool_uses(request: dict[str, Any]) -> list[str]:
    return [
        str(b.get("name"))
        for m in request["messages"]
        if m["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    ]


def _user_texts(request: dict[str, Any]) -> list[str]:
    texts = []
    for m in request["messages"]:
        if m["role"] != "user" or not isinstance(m["content"], list):
            continue
        for b in m["content"]:
            if b.get("type") == "text":
                texts.append(str(b["text"]))
            for c in b.get("content") or [] if b.get("type") == "tool_result" else []:
                texts.append(str(c.get("text", "")))
    return texts


def lead(request: dict[str, Any]) -> Reply:
    """Start both agents, wait for two replies, write the lesson into memory, answer."""
    calls = _tool_uses(request)
    replies = [t for t in _user_texts(request) if t.startswith("<thread-message")]
    if not calls:
        return Turn(
            [
                ToolUse("corral_thread_start", {"agent": "log-analyst", "task": "Time it."}),
                ToolUse("corral_thread_start", {"agent": "diff-reviewer", "task": "a3f9c21"}),
            ]
        )
    if len(replies) < 2:
        return Turn([ToolUse("corral_thread_wait", {})])
    if "write" not in calls:
        return Turn([ToolUse("write", {"file_path": NOTE, "content": LESSON + "\n"})])
    return Turn([Text(f"Saved the lesson to {NOTE}.")])


def analyst(request: dict[str, Any]) -> Reply:
    """On a thread: reply. In the later session: read the memory and quote it."""
    if first_user_text(request).startswith("<thread-message"):
        return Turn([Text("the orders-db pool ran out at 02:10")])
    if "read" not in _tool_uses(request):
        return Turn([ToolUse("read", {"file_path": NOTE})])
    found = next(t for t in _user_texts(request) if "Lesson:" in t)
    return Turn([Text("Last time: " + found.strip())])


def reviewer(request: dict[str, Any]) -> Reply:
    return Turn([Text("a3f9c21 runs one query per order: an N+1")])


SCRIPTS = by_system(
    {"You coordinate": lead, "You analyse logs": analyst, "You review diffs": reviewer}
)


@pytest.fixture
def client(server: ServerProcess, fake_model: FakeModelServer) -> anthropic.Anthropic:
    fake_model.reset(SCRIPTS)
    return server.client()


def test_the_readme_team_example_runs_as_written(
    client: anthropic.Anthropic, capsys: pytest.CaptureFixture[str]
) -> None:
    names: dict[str, Any] = {"client": client}
    exec(compile(readme_block("## A team with a memory"), "README.md", "exec"), names)
    printed = capsys.readouterr().out
    assert "log-analyst: the orders-db pool ran out at 02:10" in printed
    assert "diff-reviewer: a3f9c21 runs one query per order" in printed
    assert f"agent: Saved the lesson to {NOTE}." in printed
    session, later, store = names["session"], names["later"], names["store"]
    threads = [line.split()[1] for line in printed.splitlines() if line.startswith("sthr_")]
    assert threads[0] == "lead" and sorted(threads[1:]) == ["diff-reviewer", "log-analyst"]
    actor = f"session_id='{session.id}', type='session_actor'"
    assert any(
        ln.startswith("created /checkout.md ") and actor in ln for ln in printed.splitlines()
    )
    assert f"agent: Last time: {LESSON}" in printed
    read = [
        e
        for e in client.beta.sessions.events.list(later.id)
        if e.type == "agent.tool_result" and not e.is_error
    ]
    assert any(LESSON in "".join(getattr(b, "text", "") for b in e.content or []) for e in read)
    versions = list(client.beta.memory_stores.memory_versions.list(store.id))
    assert [getattr(v.created_by, "session_id", None) for v in versions] == [session.id]
