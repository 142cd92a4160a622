"""SQL of `PostgresStore`: statements and row mapping, run inside a caller's transaction.

Knows no pooling, listening or hub; notifications it queues (`pg_notify`) go out on commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection, errors
from psycopg.rows import TupleRow
from psycopg.types.json import Json

from corral.errors import Conflict, LeaseLost, NotFound
from corral.session.log import EventQuery, Fence, SessionSummary, StoredEvent
from corral.session.projection import CallBook, project, referenced_calls
from corral.store import postgres_calls
from corral.store.base import EventCheck, Resource, SessionFilter, SessionRow
from corral.store.sql_filters import event_where, session_columns_where
from corral.wire.events import INTERNAL_EVENT_TYPES

Conn = AsyncConnection[TupleRow]

EVENTS_CHANNEL = "corral_events"
PREVIEWS_CHANNEL = "corral_previews"
WORK_CHANNEL = "corral_work"
GONE = "gone"
"""`corral_events` payload tail meaning the session was deleted (else it is the last seq)."""

NOW_TEXT = "to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
"""The database clock in the wire's RFC 3339 form, so every process stamps with one clock."""

_ROWS = 1000
"""Events per INSERT statement (8 parameters each, well under PostgreSQL's 65535)."""
SESSION_COLUMNS = (
    "id, created_at, updated_at, archived_at, environment_id, agent_id, agent_version, "
    "status, body, usage, stats, parent_id"
)
RESOURCE_COLUMNS = "id, kind, created_at, archived_at, body"
VERSION_COLUMNS = "agent_id, 'agent', created_at, NULL, body"


async def fetchone(conn: Conn, sql: str, args: Sequence[Any] = ()) -> TupleRow | None:
    """First row of `sql`, or None."""
    cur = await conn.execute(sql, args)
    return await cur.fetchone()


async def fetchall(conn: Conn, sql: str, args: Sequence[Any] = ()) -> list[TupleRow]:
    """Every row of `sql`."""
    cur = await conn.execute(sql, args)
    return await cur.fetchall()


async def notify(conn: Conn, channel: str, payload: str) -> None:
    """Queue a notification; Postgres delivers it when the transaction commits."""
    await conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


# ---- event log ------------------------------------------------------------------------------


async def append_events(
    conn: Conn,
    session_id: str,
    bodies: list[dict[str, Any]],
    fence: Fence | None,
    wake: bool,
    *,
    check: bool = True,
    validate: EventCheck | None = None,
) -> list[StoredEvent]:
    """Append under the session row's lock (which serialises appends and numbers them).

    `validate` runs under that lock too, against the call projection as committed by every
    earlier append plus this append's earlier events; raising rolls the whole append back.
    """
    row = await _lock_session(conn, session_id, fence if check else None)
    book = CallBook(session_id=session_id, status=row[1], interrupt_pending=bool(row[5]))
    await postgres_calls.load_calls(conn, book, referenced_calls(bodies))
    for index, body in enumerate(bodies):
        if validate is not None:
            validate(book, index, body)
        book.apply(index, body)
    seq, now = int(row[0]), str(row[4])
    summary = SessionSummary(status=row[1], usage=row[2], stats=row[3])
    stored: list[StoredEvent] = []
    for body in bodies:
        seq += 1
        body.setdefault("processed_at", now)
        project(summary, body)
        stored.append(StoredEvent(session_id=session_id, seq=seq, body=body))
    await postgres_calls.save_calls(conn, book)
    if wake:
        await mark_pending(conn, session_id, 0.0)
    # The last rows go in with the row update, and followers hear of the events (at COMMIT)
    # from that same statement: one round trip per append for both.
    split = max(len(stored) - _ROWS, 0)
    head, last = stored[:split], stored[split:]
    await _insert_events(conn, head, now, fence)
    inserts, insert_args = ("", []) if not last else _insert_cte(last, now, fence)
    told = " RETURNING pg_notify(%s, %s)" if stored else ""
    try:
        await conn.execute(
            f"{inserts}UPDATE sessions SET last_seq = %s, status = %s, usage = %s, stats = %s, "
            f"updated_at = %s, interrupt_pending = %s WHERE id = %s{told}",
            (
                *insert_args,
                seq,
                summary.status,
                Json(summary.usage),
                Json(summary.stats),
                now,
                book.interrupt_pending,
                session_id,
                *((EVENTS_CHANNEL, f"{session_id}:{seq}") if stored else ()),
            ),
        )
    except errors.UniqueViolation as exc:
        raise Conflict(f"an event id of this append already exists: {exc}") from exc
    return stored


_SESSION_STATE = f"last_seq, status, usage, stats, {NOW_TEXT}, interrupt_pending"


async def _lock_session(conn: Conn, session_id: str, fence: Fence | None) -> TupleRow:
    """Lock the session row (and, for a fenced append, its lease row) and read its state.

    A fenced append locks both rows in one statement, the session's first like every other
    writer of both; it finds no row when either is missing, and the slow path below then
    says which.
    """
    if fence is not None:
        row = await fetchone(
            conn,
            f"SELECT {_SESSION_STATE}, w.owner, w.token, w.lease_expires < clock_timestamp() "
            "FROM sessions s JOIN session_work w ON w.session_id = s.id "
            "WHERE s.id = %s FOR UPDATE OF s, w",
            (session_id,),
        )
        if row is not None:
            _check_lease(fence, row[6:])
            return row
    row = await fetchone(
        conn, f"SELECT {_SESSION_STATE} FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
    )
    if row is None:
        raise NotFound(f"session {session_id} not found")
    if fence is not None:
        await check_fence(conn, fence)
    return row


_INSERT = (
    "INSERT INTO events (session_id, seq, id, type, created_at, body, writer_owner, "
    "writer_token) VALUES "
)


def _rows(stored: list[StoredEvent], now: str, fence: Fence | None) -> tuple[str, list[Any]]:
    """The VALUES list and its arguments for `stored`."""
    owner, token = (fence.owner, fence.token) if fence is not None else (None, None)
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(stored))
    args = [
        arg
        for e in stored
        for arg in (e.session_id, e.seq, e.id, e.type, now, Json(e.body), owner, token)
    ]
    return values, args


def _insert_cte(stored: list[StoredEvent], now: str, fence: Fence | None) -> tuple[str, list[Any]]:
    """`WITH ... INSERT` of `stored`, to prefix the statement that follows it."""
    values, args = _rows(stored, now, fence)
    return f"WITH inserted AS ({_INSERT}{values}) ", args


async def _insert_events(
    conn: Conn, stored: list[StoredEvent], now: str, fence: Fence | None
) -> None:
    # One statement per _ROWS events (an executemany costs a pipeline round per call).
    try:
        for start in range(0, len(stored), _ROWS):
            values, args = _rows(stored[start : start + _ROWS], now, fence)
            await conn.execute(_INSERT + values, args)
    except errors.UniqueViolation as exc:
        raise Conflict(f"an event id of this append already exists: {exc}") from exc


async def check_fence(conn: Conn, fence: Fence) -> None:
    """Reject a stale or expired fence; the row lock makes a concurrent claim wait for us."""
    row = await fetchone(
        conn,
        "SELECT owner, token, lease_expires < clock_timestamp() FROM session_work "
        "WHERE session_id = %s FOR UPDATE",
        (fence.session_id,),
    )
    _check_lease(fence, row)


def _check_lease(fence: Fence, lease: Sequence[Any] | None) -> None:
    """Raise unless `lease` (owner, token, expired) is `fence`'s and unexpired."""
    if lease is None or lease[0] != fence.owner or int(lease[1]) != fence.token:
        raise LeaseLost(f"lease on {fence.session_id} is held by another brain")
    if lease[2]:
        raise LeaseLost(f"lease on {fence.session_id} expired")


async def read_events(conn: Conn, session_id: str, query: EventQuery) -> list[StoredEvent]:
    """A positional slice of one log."""
    clauses, args = event_where(session_id, query, "%s")
    if query.types:
        clauses.append("type = ANY(%s)")
        args.append(list(query.types))
    if not query.internal:
        clauses.append("type <> ALL(%s)")
        args.append(sorted(INTERNAL_EVENT_TYPES))
    order = "DESC" if query.order == "desc" else "ASC"
    sql = f"SELECT seq, body FROM events WHERE {' AND '.join(clauses)} ORDER BY seq {order}"
    if query.limit is not None:
        sql += " LIMIT %s"
        args.append(query.limit)
    return [
        StoredEvent(session_id=session_id, seq=int(seq), body=body)
        for seq, body in await fetchall(conn, sql, args)
    ]


# ---- wake queue ------------------------------------------------------------------------------


async def mark_pending(conn: Conn, session_id: str, delay: float) -> None:
    """Mark work due after `delay` seconds (keeping an earlier due time) and tell workers."""
    await conn.execute(
        "INSERT INTO session_work (session_id, pending, due_at) "
        "VALUES (%s, TRUE, clock_timestamp() + make_interval(secs => %s)) "
        "ON CONFLICT (session_id) DO UPDATE SET pending = TRUE, due_at = CASE "
        "WHEN session_work.pending THEN least(session_work.due_at, excluded.due_at) "
        "ELSE excluded.due_at END RETURNING pg_notify(%s, %s)",
        (session_id, float(delay), WORK_CHANNEL, session_id),
    )


async def claim(conn: Conn, owner: str, lease_seconds: float, limit: int = 1) -> list[Fence]:
    """Take up to `limit` due sessions whose lease is free or expired; rows being claimed by
    others are skipped."""
    async with conn.cursor() as cur:
        await cur.execute(
            "WITH next AS (SELECT session_id, owner AS expired_owner FROM session_work WHERE "
            "(pending AND due_at <= clock_timestamp() "
            " AND (owner IS NULL OR lease_expires < clock_timestamp())) "
            "OR (owner IS NOT NULL AND lease_expires < clock_timestamp()) "
            "ORDER BY due_at LIMIT %s FOR UPDATE SKIP LOCKED) "
            "UPDATE session_work w SET owner = %s, token = w.token + 1, pending = FALSE, "
            "lease_expires = clock_timestamp() + make_interval(secs => %s) "
            "FROM next WHERE w.session_id = next.session_id "
            "RETURNING w.session_id, w.token, next.expired_owner IS NOT NULL",
            (max(limit, 1), owner, float(lease_seconds)),
        )
        rows = await cur.fetchall()
    # an owner left on the row means its lease had expired: a takeover
    return [Fence(session_id=r[0], owner=owner, token=int(r[1]), takeover=bool(r[2])) for r in rows]


async def release(conn: Conn, fence: Fence) -> bool:
    """Drop the lease; True (and workers told) when work arrived meanwhile."""
    # One statement, atomic on its own (no BEGIN/COMMIT round trips): workers are told at
    # its commit when pending work is left.
    row = await fetchone(
        conn,
        "UPDATE session_work SET owner = NULL, lease_expires = '-infinity' "
        "WHERE session_id = %s AND owner = %s AND token = %s "
        "RETURNING pending, CASE WHEN pending THEN pg_notify(%s, session_id) END",
        (fence.session_id, fence.owner, fence.token, WORK_CHANNEL),
    )
    return row is not None and bool(row[0])


# ---- resources -----------------------------------------------------------------------------


async def put_agent_version(conn: Conn, agent: Resource, expected_version: int | None) -> None:
    """Insert the next version and point the agent at it, under optimistic locking."""
    await conn.execute("SELECT 1 FROM resources WHERE id = %s FOR UPDATE", (agent.id,))
    row = await fetchone(
        conn, "SELECT max(version) FROM agent_versions WHERE agent_id = %s", (agent.id,)
    )
    latest = row[0] if row else None
    if expected_version is not None and latest != expected_version:
        raise Conflict(
            f"agent {agent.id} is at version {latest}, not {expected_version}",
            error_code="version_conflict",
        )
    version = int(agent.body["version"])
    try:
        await conn.execute(
            "INSERT INTO agent_versions (agent_id, version, created_at, body) "
            "VALUES (%s, %s, %s, %s)",
            (agent.id, version, agent.body.get("updated_at", agent.created_at), Json(agent.body)),
        )
    except errors.UniqueViolation as exc:
        raise Conflict(f"agent {agent.id} version {version} already exists") from exc
    await conn.execute(
        f"INSERT INTO resources ({RESOURCE_COLUMNS}) VALUES (%s, 'agent', %s, %s, %s) "
        "ON CONFLICT (id) DO UPDATE SET body = excluded.body, archived_at = excluded.archived_at",
        (agent.id, agent.created_at, agent.archived_at, Json(agent.body)),
    )


def session_where(where: SessionFilter, clause: str, args: list[Any]) -> tuple[str, list[Any]]:
    """Extend `page_where`'s clauses with every `sessions.list` filter (PostgreSQL's JSON)."""
    clause, args = session_columns_where(where, clause, args, "%s")
    if where.memory_store_id is not None:
        clause += (
            " AND EXISTS (SELECT 1 FROM json_array_elements(CASE WHEN "
            "json_typeof(body -> 'resources') = 'array' THEN body -> 'resources' "
            "ELSE '[]'::json END) AS r WHERE r ->> 'type' = 'memory_store' AND "
            "r ->> 'memory_store_id' = %s)"
        )
        args.append(where.memory_store_id)
    if where.statuses:
        clause += " AND status = ANY(%s)"
        args.append(list(where.statuses))
    return clause, args


def to_resource(row: Sequence[Any]) -> Resource:
    """A `RESOURCE_COLUMNS` / `VERSION_COLUMNS` row as a `Resource`."""
    return Resource(id=row[0], kind=row[1], created_at=row[2], archived_at=row[3], body=row[4])


def to_session(r: Sequence[Any]) -> SessionRow:
    """A `SESSION_COLUMNS` row as a `SessionRow`."""
    return SessionRow(
        id=r[0],
        created_at=r[1],
        updated_at=r[2],
        archived_at=r[3],
        environment_id=r[4],
        agent_id=r[5],
        agent_version=int(r[6]),
        body=r[8],
        summary=SessionSummary(status=r[7], usage=r[9], stats=r[10]),
        parent_id=r[11],
    )


def session_params(row: SessionRow) -> tuple[Any, ...]:
    """INSERT parameters in `SESSION_COLUMNS` order."""
    return (
        row.id,
        row.created_at,
        row.updated_at,
        row.archived_at,
        row.environment_id,
        row.agent_id,
        row.agent_version,
        row.summary.status,
        Json(row.body),
        Json(row.summary.usage),
        Json(row.summary.stats),
        row.parent_id,
    )
