"""`SqliteStore`: the embedded default backend (one WAL file, one process).

Leases use this process's wall clock; the fence check runs inside the append's transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from corral.errors import Conflict, LeaseLost, NotFound
from corral.ids import now_rfc3339
from corral.session.hub import Hub, HubSubscription
from corral.session.log import (
    EventQuery,
    Fence,
    NewEvents,
    Preview,
    SessionGone,
    SessionSummary,
    StoredEvent,
)
from corral.session.projection import CallBook, project, referenced_calls
from corral.session.queue import QueueStatus
from corral.store import sqlite_calls
from corral.store.base import EventCheck, Page, Resource, SessionFilter, SessionRow
from corral.store.sqlite_db import SqliteDatabase
from corral.wire.events import INTERNAL_EVENT_TYPES

_SESSION_COLUMNS = (
    "id, created_at, updated_at, archived_at, environment_id, agent_id, agent_version, "
    "status, body, usage, stats"
)


class SqliteStore:
    """Event log, wake queue and resources in one SQLite file."""

    def __init__(self, path: Path, *, fencing: bool = True) -> None:
        self.db = SqliteDatabase(path)
        self.hub = Hub()
        self._work_ready = anyio.Event()
        self._fencing = fencing  # False only in tests that prove the chaos checker can fail

    async def open(self) -> None:
        """Create/migrate the file and start the writer.

        The embedded store has exactly one process, so leases left by a previous (crashed)
        process are dead: expire them at once instead of waiting out their timeout.
        """
        await anyio.to_thread.run_sync(self.db.open)
        await self.db.write(
            lambda c: (
                c.execute(
                    "UPDATE session_work SET lease_expires = 0 WHERE owner IS NOT NULL"
                ).rowcount
            )
        )

    async def aclose(self) -> None:
        """Flush pending writes and close."""
        await anyio.to_thread.run_sync(self.db.close)

    # ---- event log -------------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        events: Sequence[dict[str, Any]],
        *,
        fence: Fence | None = None,
        wake: bool = False,
    ) -> list[StoredEvent]:
        """Append atomically after checking the fence; see `EventLog.append`."""
        bodies = [dict(e) for e in events]
        fencing = self._fencing
        stored = await self.db.write(
            lambda c: _append(c, session_id, bodies, fence, wake, check=fencing)
        )
        return self._appended(session_id, stored, wake)

    async def append_checked(
        self,
        session_id: str,
        events: Sequence[dict[str, Any]],
        check: EventCheck,
        *,
        wake: bool = False,
    ) -> list[StoredEvent]:
        """Validate and append in the single writer's transaction; see `Store.append_checked`."""
        bodies = [dict(e) for e in events]
        stored = await self.db.write(
            lambda c: _append(c, session_id, bodies, None, wake, validate=check)
        )
        return self._appended(session_id, stored, wake)

    def _appended(
        self, session_id: str, stored: list[StoredEvent], wake: bool
    ) -> list[StoredEvent]:
        if stored:
            self.hub.publish(session_id, NewEvents(last_seq=stored[-1].seq, events=tuple(stored)))
        if wake:
            self._signal_work()
        return stored

    async def read_calls(
        self, session_id: str, ids: Sequence[str] | None = None
    ) -> CallBook | None:
        """The call projection; see `Store.read_calls`."""
        return await self.db.read(lambda c: sqlite_calls.read_calls(c, session_id, ids))

    async def read(self, session_id: str, query: EventQuery) -> list[StoredEvent]:
        """A positional slice; see `EventLog.read`."""
        return await self.db.read(lambda c: _read_events(c, session_id, query))

    async def last_seq(self, session_id: str) -> int:
        """Last sequence number (0 when empty or unknown)."""

        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT max(seq) FROM events WHERE session_id = ?", (session_id,)
            ).fetchone()
            return int(row[0] or 0)

        return await self.db.read(run)

    def subscribe(self, session_id: str) -> HubSubscription:
        """Follow the session within this process."""
        return self.hub.subscribe(session_id)

    async def publish_preview(self, session_id: str, body: dict[str, Any]) -> None:
        """Fan a preview out to this process's followers."""
        self.hub.publish(session_id, Preview(body=body))

    # ---- wake queue --------------------------------------------------------------------

    async def wake(self, session_id: str, *, delay: float = 0.0) -> None:
        """Mark the session as having work."""
        due = time.time() + delay
        await self.db.write(lambda c: _mark_pending(c, session_id, due))
        self._signal_work()

    async def claim(self, owner: str, lease_seconds: float) -> Fence | None:
        """Take one due session atomically (the single writer serialises claims)."""
        found = await self.claim_many(owner, lease_seconds, 1)
        return found[0] if found else None

    async def claim_many(self, owner: str, lease_seconds: float, limit: int) -> list[Fence]:
        """Take up to `limit` due sessions in one transaction."""
        return await self.db.write(lambda c: _claim(c, owner, lease_seconds, limit))

    async def heartbeat(self, fence: Fence, lease_seconds: float) -> bool:
        """Extend the lease if it is still ours and unexpired."""

        def run(conn: sqlite3.Connection) -> bool:
            now = time.time()
            cur = conn.execute(
                "UPDATE session_work SET lease_expires = ? WHERE session_id = ? AND owner = ? "
                "AND token = ? AND lease_expires >= ?",
                (now + lease_seconds, fence.session_id, fence.owner, fence.token, now),
            )
            return cur.rowcount == 1

        return await self.db.write(run)

    async def release(self, fence: Fence) -> None:
        """Drop the lease; pending work stays claimable."""

        def run(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE session_work SET owner = NULL, lease_expires = 0 "
                "WHERE session_id = ? AND owner = ? AND token = ?",
                (fence.session_id, fence.owner, fence.token),
            )
            row = conn.execute(
                "SELECT pending FROM session_work WHERE session_id = ?", (fence.session_id,)
            ).fetchone()
            return cur.rowcount == 1 and row is not None and bool(row[0])

        if await self.db.write(run):
            self._signal_work()

    async def wait_for_work(self, timeout: float) -> None:
        """Wait for a wake in this process, or `timeout` (for expired leases, due retries)."""
        with anyio.move_on_after(timeout):
            await self._work_ready.wait()

    async def queue_status(self) -> QueueStatus:
        """Counts for `corral status`."""

        def run(conn: sqlite3.Connection) -> QueueStatus:
            now = time.time()
            row = conn.execute(
                "SELECT sum(pending = 1), sum(owner IS NOT NULL AND lease_expires >= ?), "
                "sum(owner IS NOT NULL AND lease_expires < ?) FROM session_work",
                (now, now),
            ).fetchone()
            return QueueStatus(
                pending=int(row[0] or 0), leased=int(row[1] or 0), expired=int(row[2] or 0)
            )

        return await self.db.read(run)

    def _signal_work(self) -> None:
        self._work_ready.set()
        self._work_ready = anyio.Event()

    # ---- resources ---------------------------------------------------------------------

    async def insert_resource(self, resource: Resource) -> None:
        """Insert; Conflict when the id exists."""

        def run(conn: sqlite3.Connection) -> None:
            try:
                conn.execute(
                    "INSERT INTO resources (id, kind, created_at, archived_at, body) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        resource.id,
                        resource.kind,
                        resource.created_at,
                        resource.archived_at,
                        json.dumps(resource.body),
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise Conflict(f"{resource.kind} {resource.id} already exists") from exc

        await self.db.write(run)

    async def get_resource(self, kind: str, resource_id: str) -> Resource | None:
        """The resource or None."""

        def run(conn: sqlite3.Connection) -> Resource | None:
            row = conn.execute(
                "SELECT id, kind, created_at, archived_at, body FROM resources "
                "WHERE id = ? AND kind = ?",
                (resource_id, kind),
            ).fetchone()
            return _resource(row) if row else None

        return await self.db.read(run)

    async def replace_resource(self, resource: Resource) -> None:
        """Overwrite body and archived_at."""

        def run(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE resources SET body = ?, archived_at = ? WHERE id = ? AND kind = ?",
                (json.dumps(resource.body), resource.archived_at, resource.id, resource.kind),
            )
            if cur.rowcount != 1:
                raise NotFound(f"{resource.kind} {resource.id} not found")

        await self.db.write(run)

    async def delete_resource(self, kind: str, resource_id: str) -> bool:
        """Delete; False if absent."""

        def run(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM resources WHERE id = ? AND kind = ?", (resource_id, kind)
            )
            if kind == "agent":
                conn.execute("DELETE FROM agent_versions WHERE agent_id = ?", (resource_id,))
            return cur.rowcount == 1

        return await self.db.write(run)

    async def list_resources(self, kind: str, page: Page) -> list[Resource]:
        """A page in id order."""

        def run(conn: sqlite3.Connection) -> list[Resource]:
            where, args = _page_where(page, "id", "created_at", "archived_at")
            sql = (
                "SELECT id, kind, created_at, archived_at, body FROM resources "
                f"WHERE kind = ? {where} ORDER BY id {_dir(page)} LIMIT ?"
            )
            rows = conn.execute(sql, (kind, *args, page.limit + 1)).fetchall()
            return [_resource(r) for r in rows]

        return await self.db.read(run)

    async def put_agent_version(self, agent: Resource, expected_version: int | None) -> None:
        """Insert the next version and point the agent at it, under optimistic locking."""
        return await self.db.write(lambda c: _put_agent_version(c, agent, expected_version))

    async def get_agent_version(self, agent_id: str, version: int) -> Resource | None:
        """A pinned version."""

        def run(conn: sqlite3.Connection) -> Resource | None:
            row = conn.execute(
                "SELECT agent_id, 'agent', created_at, NULL, body FROM agent_versions "
                "WHERE agent_id = ? AND version = ?",
                (agent_id, version),
            ).fetchone()
            return _resource(row) if row else None

        return await self.db.read(run)

    async def list_agent_versions(self, agent_id: str, page: Page) -> list[Resource]:
        """Versions in number order."""

        def run(conn: sqlite3.Connection) -> list[Resource]:
            op = "<" if page.order == "desc" else ">"
            after = int(page.after_id) if page.after_id else (10**9 if op == "<" else 0)
            rows = conn.execute(
                "SELECT agent_id, 'agent', created_at, NULL, body FROM agent_versions "
                f"WHERE agent_id = ? AND version {op} ? ORDER BY version {_dir(page)} LIMIT ?",
                (agent_id, after, page.limit + 1),
            ).fetchall()
            return [_resource(r) for r in rows]

        return await self.db.read(run)

    # ---- sessions ----------------------------------------------------------------------

    async def create_session(
        self, row: SessionRow, initial_events: Sequence[dict[str, Any]]
    ) -> None:
        """Insert the session and its initial events in one transaction."""
        bodies = [dict(e) for e in initial_events]

        def run(conn: sqlite3.Connection) -> list[StoredEvent]:
            if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (row.id,)).fetchone():
                raise Conflict(f"session {row.id} already exists")
            conn.execute(
                f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    row.id,
                    row.created_at,
                    row.updated_at,
                    row.archived_at,
                    row.environment_id,
                    row.agent_id,
                    row.agent_version,
                    row.summary.status,
                    json.dumps(row.body),
                    json.dumps(row.summary.usage),
                    json.dumps(row.summary.stats),
                ),
            )
            return _append(conn, row.id, bodies, None, bool(bodies)) if bodies else []

        await self.db.write(run)
        if bodies:
            self._signal_work()

    async def get_session(self, session_id: str) -> SessionRow | None:
        """The session or None."""

        def run(conn: sqlite3.Connection) -> SessionRow | None:
            r = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return _session(r) if r else None

        return await self.db.read(run)

    async def update_session(
        self, session_id: str, body: dict[str, Any], *, archived_at: str | None = None
    ) -> None:
        """Replace the body (and archive)."""

        def run(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE sessions SET body = ?, updated_at = ?, "
                "archived_at = coalesce(?, archived_at) WHERE id = ?",
                (json.dumps(body), now_rfc3339(), archived_at, session_id),
            )
            if cur.rowcount != 1:
                raise NotFound(f"session {session_id} not found")

        await self.db.write(run)

    async def delete_session(self, session_id: str) -> bool:
        """Delete row, log and queue entry."""

        def run(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM tool_calls WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM session_work WHERE session_id = ?", (session_id,))
            return cur.rowcount == 1

        deleted = await self.db.write(run)
        if deleted:
            self.hub.publish(session_id, SessionGone())
        return deleted

    async def list_sessions(self, page: Page, where: SessionFilter) -> list[SessionRow]:
        """A filtered page in id order."""

        def run(conn: sqlite3.Connection) -> list[SessionRow]:
            clause, args = _page_where(page, "id", "created_at", "archived_at")
            clause, args = _session_where(where, clause, args)
            rows = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE 1=1 {clause} "
                f"ORDER BY id {_dir(page)} LIMIT ?",
                (*args, page.limit + 1),
            ).fetchall()
            return [_session(r) for r in rows]

        return await self.db.read(run)


# ---- SQL helpers (run on the writer or a reader thread) ---------------------------------


def _append(
    conn: sqlite3.Connection,
    session_id: str,
    bodies: list[dict[str, Any]],
    fence: Fence | None,
    wake: bool,
    *,
    check: bool = True,
    validate: EventCheck | None = None,
) -> list[StoredEvent]:
    """Check fence and events, then write; nothing is written before every check passed, so
    a refused append leaves the writer's transaction untouched (see `sqlite_db`)."""
    row = conn.execute(
        "SELECT last_seq, status, usage, stats, interrupt_pending FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"session {session_id} not found")
    if fence is not None and check:
        _check_fence(conn, fence)
    book = CallBook(session_id=session_id, status=row[1], interrupt_pending=bool(row[4]))
    sqlite_calls.load_calls(conn, book, referenced_calls(bodies))
    for index, body in enumerate(bodies):
        if validate is not None:
            validate(book, index, body)
        book.apply(index, body)
    writer = (fence.owner, fence.token) if fence is not None else (None, None)
    seq = int(row[0])
    summary = SessionSummary(status=row[1], usage=json.loads(row[2]), stats=json.loads(row[3]))
    now = now_rfc3339()
    stored = []
    for body in bodies:
        seq += 1
        body.setdefault("processed_at", now)
        try:
            conn.execute(
                "INSERT INTO events (session_id, seq, id, type, created_at, body, writer_owner, "
                "writer_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, seq, body["id"], body["type"], now, json.dumps(body), *writer),
            )
        except sqlite3.IntegrityError as exc:
            raise Conflict(f"event id {body['id']} already exists") from exc
        project(summary, body)
        stored.append(StoredEvent(session_id=session_id, seq=seq, body=body))
    sqlite_calls.save_calls(conn, book)
    conn.execute(
        "UPDATE sessions SET last_seq = ?, status = ?, usage = ?, stats = ?, updated_at = ?, "
        "interrupt_pending = ? WHERE id = ?",
        (
            seq,
            summary.status,
            json.dumps(summary.usage),
            json.dumps(summary.stats),
            now,
            int(book.interrupt_pending),
            session_id,
        ),
    )
    if wake:
        _mark_pending(conn, session_id, time.time())
    return stored


def _check_fence(conn: sqlite3.Connection, fence: Fence) -> None:
    row = conn.execute(
        "SELECT owner, token, lease_expires FROM session_work WHERE session_id = ?",
        (fence.session_id,),
    ).fetchone()
    if row is None or row[0] != fence.owner or int(row[1]) != fence.token:
        raise LeaseLost(f"lease on {fence.session_id} is held by another brain")
    if float(row[2]) < time.time():
        raise LeaseLost(f"lease on {fence.session_id} expired")


def _mark_pending(conn: sqlite3.Connection, session_id: str, due: float) -> None:
    conn.execute(
        "INSERT INTO session_work (session_id, pending, due_at) VALUES (?, 1, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET pending = 1, "
        "due_at = CASE WHEN session_work.pending = 1 THEN min(session_work.due_at, excluded.due_at)"
        " ELSE excluded.due_at END",
        (session_id, due),
    )


def _claim(conn: sqlite3.Connection, owner: str, lease_seconds: float, limit: int) -> list[Fence]:
    now = time.time()
    rows = conn.execute(
        "SELECT session_id, token FROM session_work WHERE "
        "(pending = 1 AND due_at <= ? AND (owner IS NULL OR lease_expires < ?)) "
        "OR (owner IS NOT NULL AND lease_expires < ?) ORDER BY due_at LIMIT ?",
        (now, now, now, max(limit, 1)),
    ).fetchall()
    fences = []
    for session_id, token in rows:
        conn.execute(
            "UPDATE session_work SET owner = ?, token = ?, lease_expires = ?, pending = 0 "
            "WHERE session_id = ?",
            (owner, int(token) + 1, now + lease_seconds, session_id),
        )
        fences.append(Fence(session_id=session_id, owner=owner, token=int(token) + 1))
    return fences


def _put_agent_version(
    conn: sqlite3.Connection, agent: Resource, expected_version: int | None
) -> None:
    version = int(agent.body["version"])
    latest = conn.execute(
        "SELECT max(version) FROM agent_versions WHERE agent_id = ?", (agent.id,)
    ).fetchone()[0]
    if expected_version is not None and latest != expected_version:
        raise Conflict(
            f"agent {agent.id} is at version {latest}, not {expected_version}",
            error_code="version_conflict",
        )
    try:
        conn.execute(
            "INSERT INTO agent_versions (agent_id, version, created_at, body) VALUES (?,?,?,?)",
            (
                agent.id,
                version,
                agent.body.get("updated_at", agent.created_at),
                json.dumps(agent.body),
            ),
        )
    except sqlite3.IntegrityError as exc:
        raise Conflict(f"agent {agent.id} version {version} already exists") from exc
    conn.execute(
        "INSERT INTO resources (id, kind, created_at, archived_at, body) VALUES (?,?,?,?,?) "
        "ON CONFLICT (id) DO UPDATE SET body = excluded.body, archived_at = excluded.archived_at",
        (agent.id, "agent", agent.created_at, agent.archived_at, json.dumps(agent.body)),
    )


def _read_events(conn: sqlite3.Connection, session_id: str, query: EventQuery) -> list[StoredEvent]:
    clauses: list[str] = ["session_id = ?"]
    args: list[Any] = [session_id]
    for column_op, value in (
        ("seq >", query.after_seq),
        ("seq <", query.before_seq),
        ("created_at >", query.created_gt),
        ("created_at >=", query.created_gte),
        ("created_at <", query.created_lt),
        ("created_at <=", query.created_lte),
    ):
        if value is not None:
            clauses.append(f"{column_op} ?")
            args.append(value)
    if query.types:
        clauses.append(f"type IN ({','.join('?' * len(query.types))})")
        args.extend(query.types)
    if not query.internal:
        clauses.append(f"type NOT IN ({','.join('?' * len(INTERNAL_EVENT_TYPES))})")
        args.extend(sorted(INTERNAL_EVENT_TYPES))
    order = "DESC" if query.order == "desc" else "ASC"
    sql = f"SELECT seq, body FROM events WHERE {' AND '.join(clauses)} ORDER BY seq {order}"
    if query.limit is not None:
        sql += " LIMIT ?"
        args.append(query.limit)
    return [
        StoredEvent(session_id=session_id, seq=int(s), body=json.loads(b))
        for s, b in conn.execute(sql, args).fetchall()
    ]


def _page_where(
    page: Page, id_col: str, created_col: str, archived_col: str
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    if page.after_id is not None:
        clauses.append(f"{id_col} {'<' if page.order == 'desc' else '>'} ?")
        args.append(page.after_id)
    if not page.include_archived:
        clauses.append(f"{archived_col} IS NULL")
    for op, value in (
        (">", page.created_gt),
        (">=", page.created_gte),
        ("<", page.created_lt),
        ("<=", page.created_lte),
    ):
        if value is not None:
            clauses.append(f"{created_col} {op} ?")
            args.append(value)
    return "".join(f" AND {c}" for c in clauses), args


def _session_where(where: SessionFilter, clause: str, args: list[Any]) -> tuple[str, list[Any]]:
    if where.agent_id is not None:
        clause += " AND agent_id = ?"
        args.append(where.agent_id)
    if where.agent_version is not None:
        clause += " AND agent_version = ?"
        args.append(where.agent_version)
    if where.environment_id is not None:
        clause += " AND environment_id = ?"
        args.append(where.environment_id)
    if where.statuses:
        clause += f" AND status IN ({','.join('?' * len(where.statuses))})"
        args.extend(where.statuses)
    return clause, args


def _dir(page: Page) -> str:
    return "DESC" if page.order == "desc" else "ASC"


def _resource(row: Sequence[Any]) -> Resource:
    return Resource(
        id=row[0], kind=row[1], created_at=row[2], archived_at=row[3], body=json.loads(row[4])
    )


def _session(r: Sequence[Any]) -> SessionRow:
    return SessionRow(
        id=r[0],
        created_at=r[1],
        updated_at=r[2],
        archived_at=r[3],
        environment_id=r[4],
        agent_id=r[5],
        agent_version=int(r[6]),
        body=json.loads(r[8]),
        summary=SessionSummary(status=r[7], usage=json.loads(r[9]), stats=json.loads(r[10])),
    )
