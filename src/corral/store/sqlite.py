"""`SqliteStore`: the embedded default backend (one WAL file, one process).

Leases use this process's wall clock; the fence check runs inside the append's transaction.
Appends read and write the session row through `Heads`, the single writer's cache of it,
written back once per group commit.
"""

from __future__ import annotations

import json
import json.encoder
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from corral.errors import Conflict, NotFound, StoreUnavailable
from corral.ids import now_rfc3339
from corral.session.hub import Hub, HubSubscription
from corral.session.log import (
    EventQuery,
    Fence,
    NewEvents,
    Preview,
    SessionGone,
    StoredEvent,
)
from corral.session.projection import (
    CallBook,
)
from corral.session.queue import QueueStatus
from corral.store import sqlite_calls
from corral.store.base import EventCheck, Page, Resource, SessionFilter, SessionRow
from corral.store.sql_filters import direction, page_where
from corral.store.sqlite_db import SqliteDatabase
from corral.store.sqlite_memory import SqliteMemories
from corral.store.sqlite_sql import (
    INLINE_ROWS,
    SESSION_COLUMNS,
    Heads,
    append_events,
    claim_work,
    mark_pending,
    put_agent_version,
    read_events,
    session_where,
    to_resource,
    to_session,
)
from corral.store.wakeups import WorkSignal


def _touch_schema(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone()


class SqliteStore(SqliteMemories):
    """Event log, wake queue and resources in one SQLite file."""

    def __init__(self, path: Path, *, fencing: bool = True, store_timeout: float = 30.0) -> None:
        self._heads = Heads()  # touched only inside write transactions (one at a time)
        self.db = SqliteDatabase(path, self._heads, busy_seconds=store_timeout)
        self.hub = Hub()
        self._work = WorkSignal()
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
        await self.db.aclose()

    async def ping(self, timeout: float) -> None:
        """Read the schema within `timeout` on a worker thread (for `/health`); a thread
        stuck on the disk is left behind rather than holding the probe."""
        try:
            with anyio.fail_after(timeout):
                await anyio.to_thread.run_sync(
                    self.db.read_now, _touch_schema, abandon_on_cancel=True
                )
        except TimeoutError as exc:
            raise StoreUnavailable(
                f"the database file did not answer within {timeout:g} s"
            ) from exc

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
        fencing, heads = self._fencing, self._heads
        stored = await self.db.write(
            lambda c: append_events(c, heads, session_id, bodies, fence, wake, check=fencing)
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
        heads = self._heads
        stored = await self.db.write(
            lambda c: append_events(c, heads, session_id, bodies, None, wake, validate=check)
        )
        return self._appended(session_id, stored, wake)

    def _appended(
        self, session_id: str, stored: list[StoredEvent], wake: bool
    ) -> list[StoredEvent]:
        if stored:
            self.hub.publish(session_id, NewEvents(last_seq=stored[-1].seq, events=tuple(stored)))
        if wake:
            self._work.signal()
        return stored

    async def read_calls(
        self, session_id: str, ids: Sequence[str] | None = None
    ) -> CallBook | None:
        """The call projection; see `Store.read_calls`."""
        return await self.db.read(lambda c: sqlite_calls.read_calls(c, session_id, ids))

    async def read(self, session_id: str, query: EventQuery) -> list[StoredEvent]:
        """A positional slice; see `EventLog.read`.

        An ascending slice's first `INLINE_ROWS` rows are read on the caller's thread (the
        brain's read of what a client just sent is one or two events: not worth a hand-off to
        a worker thread); the rest, if any, on a worker thread, from a snapshot as late or
        later, which is still the same log continued since seqs are only appended.
        """
        if query.order != "asc" or (query.limit is not None and query.limit < 1):
            return await self.db.read(lambda c: read_events(c, session_id, query))
        head = INLINE_ROWS if query.limit is None else min(query.limit, INLINE_ROWS)
        first = self.db.read_now(lambda c: read_events(c, session_id, replace(query, limit=head)))
        if len(first) < head or query.limit == head:
            return first
        rest = replace(
            query,
            after_seq=first[-1].seq,
            limit=None if query.limit is None else query.limit - head,
        )
        return first + await self.db.read(lambda c: read_events(c, session_id, rest))

    async def last_seq(self, session_id: str) -> int:
        """Last sequence number (0 when empty or unknown)."""

        def run(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT max(seq) FROM events WHERE session_id = ?", (session_id,)
            ).fetchone()
            return int(row[0] or 0)

        return self.db.read_now(run)

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
        await self.db.write(lambda c: mark_pending(c, session_id, due))
        self._work.signal()

    async def claim(self, owner: str, lease_seconds: float) -> Fence | None:
        """Take one due session atomically (the single writer serialises claims)."""
        found = await self.claim_many(owner, lease_seconds, 1)
        return found[0] if found else None

    async def claim_many(self, owner: str, lease_seconds: float, limit: int) -> list[Fence]:
        """Take up to `limit` due sessions in one transaction."""
        self._work.claiming()
        return await self.db.write(lambda c: claim_work(c, owner, lease_seconds, limit))

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
            self._work.signal()

    async def wait_for_work(self, timeout: float) -> None:
        """Wait for a wake in this process, or `timeout` (for expired leases, due retries)."""
        await self._work.wait(timeout)

    async def queue_status(self) -> QueueStatus:
        """Counts for `corral status`."""

        def run(conn: sqlite3.Connection) -> QueueStatus:
            now = time.time()
            row = conn.execute(
                "SELECT sum(pending = 1), sum(owner IS NOT NULL AND lease_expires >= ?), "
                "sum(owner IS NOT NULL AND lease_expires < ?) FROM session_work",
                (now, now),
            ).fetchone()
            statuses = conn.execute(
                "SELECT status, count(*) FROM sessions GROUP BY status ORDER BY status"
            ).fetchall()
            return QueueStatus(
                pending=int(row[0] or 0),
                leased=int(row[1] or 0),
                expired=int(row[2] or 0),
                sessions=tuple((str(s), int(n)) for s, n in statuses),
            )

        return await self.db.read(run)

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
            return to_resource(row) if row else None

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
            where, args = page_where(page, "?")
            sql = (
                "SELECT id, kind, created_at, archived_at, body FROM resources "
                f"WHERE kind = ? {where} ORDER BY id {direction(page)} LIMIT ?"
            )
            rows = conn.execute(sql, (kind, *args, page.limit + 1)).fetchall()
            return [to_resource(r) for r in rows]

        return await self.db.read(run)

    async def put_agent_version(self, agent: Resource, expected_version: int | None) -> None:
        """Insert the next version and point the agent at it, under optimistic locking."""
        return await self.db.write(lambda c: put_agent_version(c, agent, expected_version))

    async def get_agent_version(self, agent_id: str, version: int) -> Resource | None:
        """A pinned version."""

        def run(conn: sqlite3.Connection) -> Resource | None:
            row = conn.execute(
                "SELECT agent_id, 'agent', created_at, NULL, body FROM agent_versions "
                "WHERE agent_id = ? AND version = ?",
                (agent_id, version),
            ).fetchone()
            return to_resource(row) if row else None

        return await self.db.read(run)

    async def list_agent_versions(self, agent_id: str, page: Page) -> list[Resource]:
        """Versions in number order."""

        def run(conn: sqlite3.Connection) -> list[Resource]:
            op = "<" if page.order == "desc" else ">"
            after = int(page.after_id) if page.after_id else (10**9 if op == "<" else 0)
            rows = conn.execute(
                "SELECT agent_id, 'agent', created_at, NULL, body FROM agent_versions "
                f"WHERE agent_id = ? AND version {op} ? ORDER BY version {direction(page)} LIMIT ?",
                (agent_id, after, page.limit + 1),
            ).fetchall()
            return [to_resource(r) for r in rows]

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
                f"INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
                    row.parent_id,
                ),
            )
            return append_events(conn, self._heads, row.id, bodies, None, True) if bodies else []

        await self.db.write(run)
        if bodies:
            self._work.signal()

    async def get_session(self, session_id: str) -> SessionRow | None:
        """The session or None."""

        def run(conn: sqlite3.Connection) -> SessionRow | None:
            r = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return to_session(r) if r else None

        return self.db.read_now(run)

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
            self._heads.forget(session_id)  # last: a failed delete keeps the cached row
            return cur.rowcount == 1

        deleted = await self.db.write(run)
        if deleted:
            self.hub.publish(session_id, SessionGone())
        return deleted

    async def list_sessions(self, page: Page, where: SessionFilter) -> list[SessionRow]:
        """A filtered page in id order."""

        def run(conn: sqlite3.Connection) -> list[SessionRow]:
            clause, args = page_where(page, "?")
            clause, args = session_where(where, clause, args)
            rows = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions WHERE 1=1 {clause} "
                f"ORDER BY id {direction(page)} LIMIT ?",
                (*args, page.limit + 1),
            ).fetchall()
            return [to_session(r) for r in rows]

        return await self.db.read(run)


# ---- SQL helpers (run on the writer or a reader thread) ---------------------------------
