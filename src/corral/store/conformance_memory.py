"""Conformance checks for memory stores' contents (`MemoryTable`; see `conformance`).

Each check expects a fresh, open store; nothing backend-specific.
"""

from __future__ import annotations

import hashlib
from typing import Any

import anyio

from corral.ids import new_id
from corral.store.base import Page, SessionFilter, SessionRow, Store
from corral.store.conformance_support import Check, raises
from corral.store.memory import (
    MemoryChange,
    MemoryRow,
    NoSuchMemory,
    Operation,
    PathTaken,
    StaleMemory,
    VersionFilter,
    VersionRow,
)

API = {"type": "api_actor", "api_key_id": "apikey_conformance"}


def sha(text: str) -> str:
    """Hex SHA-256 of the UTF-8 bytes."""
    return hashlib.sha256(text.encode()).hexdigest()


def change(
    store_id: str,
    memory_id: str,
    operation: Operation,
    *,
    path: str | None = None,
    content: str | None = None,
    expected: str | None = None,
    actor: dict[str, Any] | None = None,
    at: str = "2025-01-01T00:00:00.000000Z",
) -> MemoryChange:
    """A change with a fresh version id."""
    return MemoryChange(
        store_id=store_id,
        memory_id=memory_id,
        operation=operation,
        version_id=new_id("memver"),
        at=at,
        actor=actor if actor is not None else API,
        path=path,
        content=content,
        content_sha256=None if content is None else sha(content),
        expected_sha256=expected,
    )


async def create(store: Store, store_id: str, path: str, content: str = "x") -> MemoryRow:
    """A new memory at `path`."""
    row, _ = await store.write_memory(
        change(store_id, new_id("mem"), "created", path=path, content=content)
    )
    assert row is not None
    return row


async def check_memory_write_cycle(store: Store) -> None:
    """Create, modify, rename, delete: each is one version with the memory's state then."""
    sid = new_id("memstore")
    row = await create(store, sid, "/notes/a.md", "héllo")
    assert row.content_sha256 == sha("héllo") and row.content_size_bytes == len("héllo".encode())
    assert await store.get_memory(sid, row.id) == row
    assert await store.get_memory(new_id("memstore"), row.id) is None
    edited, v2 = await store.write_memory(change(sid, row.id, "modified", content="bye"))
    assert edited is not None and edited.content == "bye" and edited.version_id == v2.id
    assert edited.created_at == row.created_at and v2.operation == "modified"
    moved, v3 = await store.write_memory(change(sid, row.id, "modified", path="/b.md"))
    assert moved is not None and moved.path == "/b.md" and moved.content == "bye"
    same, again = await store.write_memory(change(sid, row.id, "modified", content="bye"))
    assert same == moved and again.id == v3.id  # nothing changed: no new version
    gone, v4 = await store.write_memory(change(sid, row.id, "deleted"))
    assert gone is None and v4.operation == "deleted" and v4.path == "/b.md"
    assert v4.content is None and v4.content_sha256 is None and v4.content_size_bytes is None
    assert await store.get_memory(sid, row.id) is None
    history = await store.list_memory_versions(sid, VersionFilter(), before_id=None, limit=10)
    assert [v.operation for v in history] == ["deleted", "modified", "modified", "created"]
    assert history[-1].content == "héllo" and history[-1].created_by == API
    await raises(NoSuchMemory, store.write_memory(change(sid, row.id, "modified", content="z")))
    await raises(NoSuchMemory, store.write_memory(change(sid, row.id, "deleted")))


async def check_memory_preconditions(store: Store) -> None:
    """A stale `expected_sha256` changes nothing; a matching one applies."""
    sid = new_id("memstore")
    row = await create(store, sid, "/a.md", "one")
    stale = change(sid, row.id, "modified", content="two", expected=sha("zero"))
    await raises(StaleMemory, store.write_memory(stale))
    await raises(StaleMemory, store.write_memory(change(sid, row.id, "deleted", expected="0")))
    assert await store.get_memory(sid, row.id) == row
    ok = change(sid, row.id, "modified", content="two", expected=sha("one"))
    new, _ = await store.write_memory(ok)
    assert new is not None and new.content == "two"
    assert len(await store.list_memory_versions(sid, VersionFilter(), before_id=None, limit=9)) == 2


async def check_memory_paths_unique(store: Store) -> None:
    """Create or rename onto a taken path fails; other stores and freed paths are fine."""
    sid = new_id("memstore")
    a = await create(store, sid, "/a.md")
    b = await create(store, sid, "/b.md")
    await raises(PathTaken, create(store, sid, "/a.md"))
    await raises(PathTaken, store.write_memory(change(sid, b.id, "modified", path="/a.md")))
    assert (await store.get_memory(sid, b.id)) == b
    await create(store, new_id("memstore"), "/a.md")
    await store.write_memory(change(sid, a.id, "deleted"))
    await create(store, sid, "/a.md")


async def check_memory_concurrent_preconditions(store: Store) -> None:
    """Of concurrent updates expecting the same content, exactly one wins."""
    sid = new_id("memstore")
    row = await create(store, sid, "/race.md", "base")
    results: list[str] = []

    async def attempt(n: int) -> None:
        try:
            await store.write_memory(
                change(sid, row.id, "modified", content=f"v{n}", expected=sha("base"))
            )
            results.append("won")
        except StaleMemory:
            results.append("lost")

    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(attempt, n)
    assert sorted(results) == ["lost"] * 4 + ["won"]


async def check_memory_prefix_listing(store: Store) -> None:
    """Prefixes match whole segments in byte order; `after`/`start` page through them."""
    sid = new_id("memstore")
    for path in ("/notes/b.md", "/notes/a.md", "/notes-x/c.md", "/notes/deep/d.md", "/z.md"):
        await create(store, sid, path)

    async def paths(prefix: str, **kw: Any) -> list[str]:
        return [r.path for r in await store.list_memories(sid, prefix, limit=50, **kw)]

    assert await paths("/notes/") == ["/notes/a.md", "/notes/b.md", "/notes/deep/d.md"]
    assert await paths("/") == [
        "/notes-x/c.md",
        "/notes/a.md",
        "/notes/b.md",
        "/notes/deep/d.md",
        "/z.md",
    ]
    assert await paths("/notes/", after="/notes/a.md") == ["/notes/b.md", "/notes/deep/d.md"]
    assert await paths("/", start="/notes0") == ["/z.md"]
    assert [r.path for r in await store.list_memories(sid, "/", limit=2)] == [
        "/notes-x/c.md",
        "/notes/a.md",
    ]


async def check_memory_version_filters(store: Store) -> None:
    """Filters by memory, operation, actor and time; newest first; `before_id` pages."""
    sid = new_id("memstore")
    session = {"type": "session_actor", "session_id": "sesn_x"}
    first = await create(store, sid, "/a.md", "1")
    await store.write_memory(
        change(sid, first.id, "modified", content="2", actor=session, at="2025-01-02T00:00:00Z")
    )
    other = await create(store, sid, "/b.md")

    async def listed(where: VersionFilter, before: str | None = None) -> list[VersionRow]:
        return await store.list_memory_versions(sid, where, before_id=before, limit=10)

    assert {v.memory_id for v in await listed(VersionFilter(memory_id=first.id))} == {first.id}
    by_session = await listed(VersionFilter(actor_type="session_actor", actor_id="sesn_x"))
    assert [v.created_by for v in by_session] == [session]
    created = await listed(VersionFilter(operation="created"))
    assert [v.memory_id for v in created] == [other.id, first.id]
    late = await listed(VersionFilter(created_gte="2025-01-02T00:00:00Z"))
    assert [v.content for v in late] == ["2"]
    every = await listed(VersionFilter())
    assert [v.id for v in every] == sorted((v.id for v in every), reverse=True)
    assert [v.id for v in await listed(VersionFilter(), every[0].id)] == [v.id for v in every[1:]]


async def check_memory_redaction(store: Store) -> None:
    """Redaction blanks a version for good, keeps its author and first stamp."""
    sid = new_id("memstore")
    row = await create(store, sid, "/secret.md", "token=abc")
    who = {"type": "user_actor", "user_id": "user_1"}
    done = await store.redact_memory_version(sid, row.version_id, who, "2025-02-01T00:00:00Z")
    assert done is not None and done.redacted_at == "2025-02-01T00:00:00Z"
    assert (done.path, done.content, done.content_sha256, done.content_size_bytes) == (None,) * 4
    assert done.created_by == API and done.redacted_by == who
    twice = await store.redact_memory_version(sid, row.version_id, API, "2025-03-01T00:00:00Z")
    assert twice == done
    assert await store.get_memory_version(sid, row.version_id) == done
    assert await store.redact_memory_version(sid, new_id("memver"), API, "x") is None
    assert (await store.get_memory(sid, row.id)) == row  # the live memory is untouched


async def check_memory_purge(store: Store) -> None:
    """Purging a store removes its memories and versions and nothing of other stores."""
    sid, keep = new_id("memstore"), new_id("memstore")
    row = await create(store, sid, "/a.md")
    kept = await create(store, keep, "/a.md")
    await store.purge_memory_store(sid)
    assert await store.get_memory(sid, row.id) is None
    assert await store.get_memory_version(sid, row.version_id) is None
    assert await store.get_memory(keep, kept.id) == kept


async def check_sessions_by_memory_store(store: Store) -> None:
    """`SessionFilter.memory_store_id` finds sessions with that store among their resources."""
    wanted = new_id("memstore")
    resources = [
        {"type": "file", "file_id": "file_1", "mount_path": "/mnt/data/x"},
        {"type": "memory_store", "memory_store_id": wanted, "mount_path": "/mnt/memory/a"},
    ]
    rows = {}
    for name, body in (
        ("with", {"resources": resources}),
        ("other", {"resources": [{**resources[1], "memory_store_id": new_id("memstore")}]}),
        ("none", {"resources": []}),
        ("null", {"resources": None}),
        ("missing", {}),
    ):
        rows[name] = SessionRow(
            id=new_id("sesn"),
            created_at="2025-01-01T00:00:00.000000Z",
            environment_id="env_x",
            agent_id="agent_x",
            agent_version=1,
            body=body,
        )
        await store.create_session(rows[name], [])
    found = await store.list_sessions(Page(limit=10), SessionFilter(memory_store_id=wanted))
    assert [r.id for r in found] == [rows["with"].id]
    everything = await store.list_sessions(Page(limit=10), SessionFilter())
    assert len(everything) == 5


MEMORY_CHECKS: list[Check] = [
    check_memory_write_cycle,
    check_memory_preconditions,
    check_memory_paths_unique,
    check_memory_concurrent_preconditions,
    check_memory_prefix_listing,
    check_memory_version_filters,
    check_memory_redaction,
    check_memory_purge,
    check_sessions_by_memory_store,
]
