"""The SQLite writer's session-row cache never makes an append disagree with the file.

`SqliteStore` keeps each session's last seq, status and usage in its single writer between
transactions and writes them back once per commit; these cases are where such a cache goes
stale: a row changed by another connection, an op undone inside a group commit, a deleted
session. Each would log a wrong seq (or an event for a missing session) without its guard.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.errors import Conflict, NotFound
from corral.session.log import EventQuery
from corral.store.conformance_support import event, new_session, seqs
from corral.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(tmp_path / "corral.db")
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()


async def logged(store: SqliteStore, session_id: str) -> list[int]:
    return [e.seq for e in await store.read(session_id, EventQuery(internal=True))]


async def test_a_row_changed_by_another_connection_is_read_again(store: SqliteStore) -> None:
    sid = await new_session(store)
    await store.append(sid, [event()])
    other = event()
    conn = sqlite3.connect(store.db.path)  # another process appending to the same file
    with conn:
        conn.execute(
            "INSERT INTO events (session_id, seq, id, type, created_at, body) "
            "VALUES (?, 2, ?, 'user.message', '2025-01-01T00:00:00Z', '{}')",
            (sid, other["id"]),
        )
        conn.execute("UPDATE sessions SET last_seq = 2, status = 'running' WHERE id = ?", (sid,))
    conn.close()

    stored = await store.append(sid, [event()])

    assert seqs(stored) == [3]
    assert await logged(store, sid) == [1, 2, 3]
    row = await store.get_session(sid)
    assert row is not None and row.summary.status == "running"


async def test_an_op_undone_in_a_group_commit_leaves_no_trace(store: SqliteStore) -> None:
    sid = await new_session(store)
    first = event()
    # One event loop tick, so one transaction: the middle append fails after writing a row
    # (its second event reuses an id), which rolls the batch back and redoes the others.
    results = await asyncio.gather(
        store.append(sid, [first]),
        store.append(sid, [event(), {**event(), "id": first["id"]}]),
        store.append(sid, [event()]),
        return_exceptions=True,
    )

    assert isinstance(results[1], Conflict)
    assert [seqs(r) for r in (results[0], results[2]) if isinstance(r, list)] == [[1], [2]]
    assert seqs(await store.append(sid, [event()])) == [3]
    assert await logged(store, sid) == [1, 2, 3]


async def test_a_deleted_session_is_not_appended_to_nor_resumed(store: SqliteStore) -> None:
    sid = await new_session(store)
    await store.append(sid, [event(), event()])
    assert await store.delete_session(sid)

    with pytest.raises(NotFound):
        await store.append(sid, [event()])
    await new_session(store, session_id=sid)
    assert seqs(await store.append(sid, [event()])) == [1]
