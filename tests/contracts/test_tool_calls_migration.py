"""Schema v4 backfills the tool-call projection of existing logs exactly as appends keep it,
and both agree with the brain's own fold of the log.

A log is written through a v4 store; the database is then put back to v3 (projection dropped)
and reopened, so migration 4 rebuilds the projection from the log alone.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from corral.brain.state import fold
from corral.session.log import EventQuery
from corral.store.base import Store
from corral.store.conformance_support import new_session
from corral.store.postgres import PostgresStore
from corral.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio

Projection = tuple[dict[str, tuple[str, str | None]], bool]
"""call id -> (state, confirmation), and whether an interrupt is pending."""

_counter = iter(range(1_000_000))


def ev(kind: str, **fields: Any) -> dict[str, Any]:
    """A well-formed event body (the brain's fold parses every one)."""
    return {"id": f"sevt_m{next(_counter):06d}", "type": kind, **fields}


def call(kind: str = "agent.custom_tool_use", **fields: Any) -> dict[str, Any]:
    return ev(kind, name="t", input={}, **fields)


def idle(reason: str = "end_turn") -> dict[str, Any]:
    stop: dict[str, Any] = {"type": reason}
    if reason == "requires_action":
        stop["event_ids"] = []
    return ev("session.status_idle", stop_reason=stop)


def result(kind: str, use: dict[str, Any]) -> dict[str, Any]:
    key = {
        "user.custom_tool_result": "custom_tool_use_id",
        "agent.mcp_tool_result": "mcp_tool_use_id",
    }
    return ev(kind, **{key.get(kind, "tool_use_id"): use["id"], "content": []})


def verdict(use: dict[str, Any], answer: str) -> dict[str, Any]:
    return ev("user.tool_confirmation", tool_use_id=use["id"], result=answer)


def scenarios() -> list[list[list[dict[str, Any]]]]:
    """Logs as lists of appends, covering every rule of the projection."""
    a, b, e, f, h, i, j, k = (call() for _ in range(8))
    ask = call("agent.tool_use", evaluated_permission="ask")
    mcp = call("agent.mcp_tool_use", evaluated_permission="ask")
    allowed = call("agent.tool_use")
    interrupt, running = ev("user.interrupt"), ev("session.status_running")
    return [
        [
            [running, a, b, ask, mcp, idle("requires_action")],
            [result("user.custom_tool_result", a)],
            [verdict(ask, "allow")],
            [verdict(ask, "deny")],
        ],
        [[e, idle("requires_action")], [interrupt]],
        [
            [f, allowed],
            [result("agent.tool_result", allowed)],
            [ev("user.interrupt"), ev("session.status_running"), idle()],
            [result("user.custom_tool_result", f), result("agent.mcp_tool_result", mcp)],
        ],
        [[h], [ev("session.status_terminated")]],
        [[i, j], [result("user.custom_tool_result", j), idle(), k]],
        [],
    ]


async def projection(store: Store, session_id: str) -> Projection:
    book = await store.read_calls(session_id)
    assert book is not None
    return {c: (x.state, x.confirmation) for c, x in book.calls.items()}, book.interrupt_pending


async def folded(store: Store, session_id: str) -> Projection:
    """What the brain's fold of the log says of the same calls."""
    log = await store.read(session_id, EventQuery(internal=True))
    state = fold((e.seq, e.body) for e in log)
    calls = {
        c.event_id: (
            "answered" if c.result_seq is not None else "abandoned" if c.abandoned else "open",
            c.confirmation,
        )
        for c in state.calls.values()
    }
    return calls, state.interrupt_pending


MIGRATIONS = Path(__file__).parents[2] / "src" / "corral" / "store" / "migrations"


def tables_after_v4(dialect: str) -> list[str]:
    """Tables that migrations after 4 create, so going back to v3 undoes them too."""
    names: list[str] = []
    for script in sorted((MIGRATIONS / dialect).glob("*.sql")):
        if int(script.name[:4]) > 4:
            text = script.read_text()
            names += re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", text)
    assert names, "expected later migrations to create tables"
    return names


UNDO_V7 = (
    "DROP INDEX sessions_parent; ALTER TABLE sessions DROP COLUMN parent_id; "
    "DROP INDEX events_session_event_id; CREATE UNIQUE INDEX events_id ON events (id);"
)
"""Undo migration 7 (threads), which changed tables that exist at v3."""


def back_to_v3_sqlite(store: SqliteStore) -> Callable[[], None]:
    def run() -> None:
        later = "".join(f"DROP TABLE {t};" for t in tables_after_v4("sqlite"))
        conn = sqlite3.connect(store.db.path)
        conn.executescript(
            f"{later} DROP TABLE tool_calls; ALTER TABLE sessions DROP COLUMN interrupt_pending;"
            f"{UNDO_V7} DELETE FROM schema_version WHERE version >= 4;"
        )
        conn.close()

    return run


def back_to_v3_postgres(store: PostgresStore) -> Callable[[], None]:
    def run() -> None:
        with psycopg.connect(store.url, autocommit=True) as conn:
            for table in tables_after_v4("postgres"):
                conn.execute(f"DROP TABLE {table}")
            conn.execute("DROP TABLE tool_calls")
            conn.execute("ALTER TABLE sessions DROP COLUMN interrupt_pending")
            for statement in UNDO_V7.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("DELETE FROM schema_version WHERE version >= 4")

    return run


async def test_backfill_matches_appends_and_fold(store_factory: Callable[[], Store]) -> None:
    store = store_factory()
    await store.open()
    kept: dict[str, Projection] = {}
    try:
        for appends in scenarios():
            sid = await new_session(store)
            for batch in appends:
                await store.append(sid, batch)
            kept[sid] = await projection(store, sid)
            assert kept[sid] == await folded(store, sid), "appends disagree with the fold"
    finally:
        await store.aclose()
    assert any(pending for _, pending in kept.values())
    assert {s for calls, _ in kept.values() for s, _ in calls.values()} == {
        "open",
        "answered",
        "abandoned",
    }
    if isinstance(store, SqliteStore):
        back_to_v3_sqlite(store)()
    else:
        assert isinstance(store, PostgresStore)
        back_to_v3_postgres(store)()
    reopened = store_factory()
    await reopened.open()
    try:
        for sid, expected in kept.items():
            assert await projection(reopened, sid) == expected, "backfill disagrees"
    finally:
        await reopened.aclose()
