"""Memory stores mounted in real sandboxes (SDK -> server -> bubblewrap): what an agent
writes under /mnt/memory/<slug> becomes versions attributed to its session, a later session
reads it, read-only mounts refuse writes, conflicts resolve to the server's version, and
what cannot be a memory (too big, links) is never uploaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import ServerProcess

TOOLSET = {"type": "agent_toolset_20260401"}
MOUNT = "/mnt/memory/team-notes"


def bash(command: str) -> Turn:
    return Turn([ToolUse("bash", {"command": command})])


class Steps:
    """Replies in order; a callable step runs when its request arrives (between tool calls)."""

    def __init__(self, steps: list[Turn | Callable[[], Turn]]) -> None:
        self.steps = list(steps)

    def __call__(self, request: dict[str, Any]) -> Turn:
        step = self.steps.pop(0)
        return step() if callable(step) else step


def results(client: anthropic.Anthropic, session_id: str) -> list[Any]:
    return [e for e in events(client, session_id) if e.type == "agent.tool_result"]


def text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


def new_session(client: anthropic.Anthropic, store_id: str, access: str = "read_write") -> str:
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="mem",
        tools=[TOOLSET],  # type: ignore[list-item]
    )
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session = client.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[
            {"type": "memory_store", "memory_store_id": store_id, "access": access}  # type: ignore[typeddict-item]
        ],
    )
    return session.id


def run(client: anthropic.Anthropic, fake: FakeModelServer, session_id: str, steps: Steps) -> None:
    fake.reset(steps)
    say(client, session_id, "go")
    wait_idle(client, session_id, stop="end_turn", timeout=60)


def test_session_writes_later_session_reads(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    stores = client.beta.memory_stores
    store = stores.create(name="Team Notes", description="Lessons")
    first = new_session(client, store.id)
    write = (
        f"printf 'remember X' > {MOUNT}/notes.md && mkdir -p {MOUNT}/sub && "
        f"echo tmp > {MOUNT}/sub/scratch.md && ln -s /etc/hostname {MOUNT}/link.md && "
        f"head -c 200000 /dev/zero | tr '\\0' a > {MOUNT}/big.md && echo wrote"
    )
    run(
        client,
        fake_model,
        first,
        Steps([bash(write), bash(f"rm {MOUNT}/sub/scratch.md && echo gone"), Turn([Text("ok")])]),
    )
    wrote, removed = results(client, first)
    assert "wrote" in text(wrote)
    assert f"{MOUNT}/big.md was not saved" in text(wrote)  # over 100 KB: refused, said once
    assert "not saved" not in text(removed)

    listed = {m.path: m for m in stores.memories.list(store.id, view="full")}
    assert list(listed) == ["/notes.md"]  # no link, no big file, scratch deleted again
    assert listed["/notes.md"].content == "remember X"  # type: ignore[union-attr]
    versions = list(stores.memory_versions.list(store.id, session_id=first))
    assert sorted((v.operation, v.path) for v in versions) == [
        ("created", "/notes.md"),
        ("created", "/sub/scratch.md"),
        ("deleted", "/sub/scratch.md"),
    ]
    for version in versions:
        assert version.created_by is not None and version.created_by.type == "session_actor"
        assert version.created_by.session_id == first

    # A later, read-only session reads it and cannot write.
    second = new_session(client, store.id, access="read_only")
    run(
        client,
        fake_model,
        second,
        Steps(
            [
                bash(f"cat {MOUNT}/notes.md"),
                bash(f"echo nope > {MOUNT}/new.md; echo nope >> {MOUNT}/notes.md"),
                Turn([Text("ok")]),
            ]
        ),
    )
    read, refused = results(client, second)
    assert text(read).strip() == "remember X"
    assert "new.md: Read-only file system" in text(refused)
    assert any(f"notes.md: {why}" in text(refused) for why in ("Read-only", "Permission denied"))
    assert [m.path for m in stores.memories.list(store.id)] == ["/notes.md"]
    assert list(stores.memory_versions.list(store.id, session_id=second)) == []
    system = fake_model.requests[0]["system"]
    prompt = system if isinstance(system, str) else system[0]["text"]
    assert f"{MOUNT} (read_only): Team Notes - Lessons" in prompt


def test_conflict_server_wins(server: ServerProcess, fake_model: FakeModelServer) -> None:
    client = server.client()
    stores = client.beta.memory_stores
    store = stores.create(name="team notes")
    memory = stores.memories.create(store.id, path="/notes.md", content="v1")
    gone = stores.memories.create(store.id, path="/gone.md", content="old")
    session = new_session(client, store.id)

    def someone_else_edits() -> Turn:
        stores.memories.update(memory.id, memory_store_id=store.id, content="theirs")
        stores.memories.create(store.id, path="/fresh.md", content="from the api")
        stores.memories.delete(gone.id, memory_store_id=store.id)
        return bash(f"echo mine > {MOUNT}/notes.md")

    def and_again() -> Turn:
        stores.memories.update(memory.id, memory_store_id=store.id, content="theirs again")
        return bash(f"echo mine again > {MOUNT}/notes.md")

    run(
        client,
        fake_model,
        session,
        Steps(
            [
                bash(f"cat {MOUNT}/notes.md; echo; ls {MOUNT}"),
                someone_else_edits,
                bash(f"cat {MOUNT}/notes.md; echo; cat {MOUNT}/fresh.md; echo; ls {MOUNT}"),
                and_again,
                Turn([Text("ok")]),
            ]
        ),
    )
    before, wrote, after, again = results(client, session)
    assert text(before).split() == ["v1", "gone.md", "notes.md"]
    assert "the store's version wins" in text(wrote) and "/notes.md" in text(wrote)
    # the store's version replaced the agent's; the API's other changes were copied in
    assert text(after).split() == ["theirs", "from", "the", "api", "fresh.md", "notes.md"]
    assert "the store's version wins" in text(again)  # every conflict is reported
    kept = stores.memories.retrieve(memory.id, memory_store_id=store.id)
    assert kept.content == "theirs again"
    assert list(stores.memory_versions.list(store.id, session_id=session)) == []
