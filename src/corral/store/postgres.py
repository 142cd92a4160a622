"""`PostgresStore`: the scale-out backend shared by many API and worker processes.

Same contract as `SqliteStore`, with the database's clock for leases, row locks for ordering
and fencing, and LISTEN/NOTIFY to tell other processes' followers to look again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import errors
from psycopg.types.json import Json
from psycopg_pool import AsyncConnectionPool

from corral.errors import Conflict, NotFound, StoreUnavailable
from corral.session.hub import Hub, HubSubscription
from corral.session.log import (
    EventQuery,
    Fence,
    NewEvents,
    Preview,
    SessionGone,
    Signal,
    StoredEvent,
)
from corral.session.projection import CallBook
from corral.session.queue import QueueStatus
from corral.store import postgres_calls
from corral.store import postgres_sql as q
from corral.store.base import EventCheck, Page, Resource, SessionFilter, SessionRow
from corral.store.postgres_bound import (
    BoundedPool,
    TrackingCursor,
    connect_options,
    server_timeouts,
)
from corral.store.postgres_db import Listener, migrate, preview_payloads
from corral.store.postgres_memory import PostgresMemories
from corral.store.postgres_probe import probe
from corral.store.sql_filters import direction, page_where
from corral.store.wakeups import WorkSignal

log = logging.getLogger("corral.store.postgres")


class PostgresStore(PostgresMemories):
    """Event log, wake queue and resources in one PostgreSQL database."""

    def __init__(
        self,
        url: str,
        *,
        fencing: bool = True,
        pool_size: int = 10,
        store_timeout: float = 10.0,
    ) -> None:
        self.url = url
        self.store_timeout = store_timeout
        """Longest wait for a connection and what is done with it (`postgres_bound`)."""
        self.hub = Hub()
        self.origin = uuid.uuid4().hex[:12]
        """Tags this process's preview notifications so its listener skips them."""
        self._fencing = fencing  # False only in tests that prove the chaos checker can fail
        self._pool_size = pool_size
        self._pool: BoundedPool | None = None
        self._work = WorkSignal()
        self._appending: dict[str, int] = {}
        """Session id -> this process's appends to it not yet published."""
        self._held: dict[str, int] = {}
        """Session id -> the highest seq a NOTIFY named while such an append was in flight."""
        self.listener = Listener(
            url,
            origin=self.origin,
            hub=self.hub,
            on_work=self._work.signal,
            resync=self._resync,
            on_events=self._notified,
        )

    async def open(self) -> None:
        """Connect, apply pending migrations and start listening.

        Unlike the embedded store, leases are left alone: other live processes may hold them.
        One plain connection first: the pool would retry a dead server for 30 s (see
        `postgres_probe`).
        """
        await probe(self.url)
        pool: AsyncConnectionPool[q.Conn] = AsyncConnectionPool(
            self.url,
            min_size=min(2, self._pool_size),
            max_size=self._pool_size,
            kwargs={
                "autocommit": True,
                "cursor_factory": TrackingCursor,
                **connect_options(self.url, self.store_timeout),
            },
            configure=server_timeouts(self.store_timeout),
            open=False,
            name=f"corral-{self.origin}",
        )
        await pool.open(wait=True)
        self._pool = BoundedPool(pool, self.store_timeout)
        try:
            async with pool.connection() as conn:
                await migrate(conn)
            await self.listener.start()
        except BaseException:
            await pool.close()
            self._pool = None
            raise

    async def aclose(self) -> None:
        """Stop listening and close the pool."""
        await self.listener.stop()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> BoundedPool:
        """The connection pool (open between `open()` and `aclose()`), bounded in time."""
        if self._pool is None:
            raise RuntimeError("PostgresStore is not open")
        return self._pool

    async def ping(self, timeout: float) -> None:
        """`SELECT 1` within `timeout` (for `/health`)."""
        async with self.pool.connection(timeout) as conn:
            await conn.execute("SELECT 1")

    async def schema_version(self) -> int:
        """The applied schema version."""
        async with self.pool.connection() as conn:
            row = await q.fetchone(conn, "SELECT coalesce(max(version), 0) FROM schema_version")
            return int(row[0]) if row else 0

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
        check = self._fencing
        with self._appending_to(session_id):
            async with self.pool.connection() as conn, conn.transaction():
                stored = await q.append_events(conn, session_id, bodies, fence, wake, check=check)
            return self._appended(session_id, stored, wake)

    async def append_checked(
        self,
        session_id: str,
        events: Sequence[dict[str, Any]],
        check: EventCheck,
        *,
        wake: bool = False,
    ) -> list[StoredEvent]:
        """Validate and append under the session row's lock; see `Store.append_checked`."""
        bodies = [dict(e) for e in events]
        with self._appending_to(session_id):
            async with self.pool.connection() as conn, conn.transaction():
                stored = await q.append_events(conn, session_id, bodies, None, wake, validate=check)
            return self._appended(session_id, stored, wake)

    @contextmanager
    def _appending_to(self, session_id: str) -> Iterator[None]:
        """Around a local append: the NOTIFY of its commit can reach the listener before the
        append publishes its events here, and followers would read the log for what the
        append is about to hand them. Log notifications for the session are held until it
        has published (or failed), then passed on when they name anything beyond it."""
        self._appending[session_id] = self._appending.get(session_id, 0) + 1
        try:
            yield
        finally:
            left = self._appending.pop(session_id) - 1
            if left:
                self._appending[session_id] = left
            elif (held := self._held.pop(session_id, None)) is not None:
                self.hub.publish(session_id, NewEvents(last_seq=held))

    def _notified(self, session_id: str, signal: Signal) -> None:
        """The listener heard of an append to (or the deletion of) a log."""
        if isinstance(signal, NewEvents) and session_id in self._appending:
            self._held[session_id] = max(self._held.get(session_id, 0), signal.last_seq)
            return
        self.hub.publish(session_id, signal)

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
        async with self.pool.connection() as conn:
            return await postgres_calls.read_calls(conn, session_id, ids)

    async def read(self, session_id: str, query: EventQuery) -> list[StoredEvent]:
        """A positional slice; see `EventLog.read`."""
        async with self.pool.connection() as conn:
            return await q.read_events(conn, session_id, query)

    async def last_seq(self, session_id: str) -> int:
        """Last sequence number (0 when empty or unknown)."""
        async with self.pool.connection() as conn:
            row = await q.fetchone(
                conn, "SELECT last_seq FROM sessions WHERE id = %s", (session_id,)
            )
            return int(row[0]) if row else 0

    def subscribe(self, session_id: str) -> HubSubscription:
        """Follow the session: this process's appends and, via LISTEN, every other's."""
        return self.hub.subscribe(session_id)

    async def publish_preview(self, session_id: str, body: dict[str, Any]) -> None:
        """Fan a preview out here at once and to other processes through NOTIFY."""
        self.hub.publish(session_id, Preview(body=body))
        payloads = preview_payloads(self.origin, session_id, body)
        if not payloads:
            return
        try:
            async with self.pool.connection() as conn:
                for payload in payloads:
                    await q.notify(conn, q.PREVIEWS_CHANNEL, payload)
        except (psycopg.Error, StoreUnavailable) as exc:
            # Previews are ephemeral and the finished event follows in the log: losing one
            # must not fail the model stream that produced it.
            log.warning("preview for %s not sent: %s", session_id, exc)

    async def _resync(self, session_ids: list[str]) -> None:
        """After a lost LISTEN connection: tell followers where each log ends now."""
        if not session_ids:
            return
        async with self.pool.connection() as conn:
            rows = await q.fetchall(
                conn, "SELECT id, last_seq FROM sessions WHERE id = ANY(%s)", (session_ids,)
            )
        found = {str(r[0]): int(r[1]) for r in rows}
        for session_id in session_ids:
            if session_id in found:
                self.hub.publish(session_id, NewEvents(last_seq=found[session_id]))
            else:
                self.hub.publish(session_id, SessionGone())

    # ---- wake queue --------------------------------------------------------------------

    async def wake(self, session_id: str, *, delay: float = 0.0) -> None:
        """Mark the session as having work (due by the database clock)."""
        async with self.pool.connection() as conn, conn.transaction():
            await q.mark_pending(conn, session_id, delay)
        self._work.signal()

    async def claim(self, owner: str, lease_seconds: float) -> Fence | None:
        """Take one due session (`FOR UPDATE SKIP LOCKED`), bumping its token."""
        found = await self.claim_many(owner, lease_seconds, 1)
        return found[0] if found else None

    async def claim_many(self, owner: str, lease_seconds: float, limit: int) -> list[Fence]:
        """Take up to `limit` due sessions in one statement."""
        self._work.claiming()
        async with self.pool.connection() as conn:
            return await q.claim(conn, owner, lease_seconds, limit)

    async def heartbeat(self, fence: Fence, lease_seconds: float) -> bool:
        """Extend the lease if it is still ours and unexpired."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE session_work SET lease_expires = clock_timestamp() + "
                "make_interval(secs => %s) WHERE session_id = %s AND owner = %s AND token = %s "
                "AND lease_expires >= clock_timestamp()",
                (float(lease_seconds), fence.session_id, fence.owner, fence.token),
            )
            return cur.rowcount == 1

    async def release(self, fence: Fence) -> None:
        """Drop the lease; pending work stays claimable."""
        async with self.pool.connection() as conn:
            pending = await q.release(conn, fence)
        if pending:
            self._work.signal()

    async def wait_for_work(self, timeout: float) -> None:
        """Wait for a wake from any process, or `timeout` (expired leases, due retries)."""
        await self._work.wait(timeout)

    async def queue_status(self) -> QueueStatus:
        """Counts for `corral status`."""
        async with self.pool.connection() as conn:
            row = await q.fetchone(
                conn,
                "SELECT count(*) FILTER (WHERE pending), "
                "count(*) FILTER (WHERE owner IS NOT NULL AND lease_expires >= clock_timestamp()),"
                " count(*) FILTER (WHERE owner IS NOT NULL AND lease_expires < clock_timestamp())"
                " FROM session_work",
            )
            async with conn.cursor() as cur:
                await cur.execute(
                    "SELECT status, count(*) FROM sessions GROUP BY status ORDER BY status"
                )
                statuses = await cur.fetchall()
        assert row is not None
        return QueueStatus(
            pending=int(row[0]),
            leased=int(row[1]),
            expired=int(row[2]),
            sessions=tuple((str(s), int(n)) for s, n in statuses),
        )

    # ---- resources ---------------------------------------------------------------------

    async def insert_resource(self, resource: Resource) -> None:
        """Insert; Conflict when the id exists."""
        try:
            async with self.pool.connection() as conn:
                await conn.execute(
                    f"INSERT INTO resources ({q.RESOURCE_COLUMNS}) VALUES (%s, %s, %s, %s, %s)",
                    (
                        resource.id,
                        resource.kind,
                        resource.created_at,
                        resource.archived_at,
                        Json(resource.body),
                    ),
                )
        except errors.UniqueViolation as exc:
            raise Conflict(f"{resource.kind} {resource.id} already exists") from exc

    async def get_resource(self, kind: str, resource_id: str) -> Resource | None:
        """The resource or None."""
        async with self.pool.connection() as conn:
            row = await q.fetchone(
                conn,
                f"SELECT {q.RESOURCE_COLUMNS} FROM resources WHERE id = %s AND kind = %s",
                (resource_id, kind),
            )
        return q.to_resource(row) if row else None

    async def replace_resource(self, resource: Resource) -> None:
        """Overwrite body and archived_at."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE resources SET body = %s, archived_at = %s WHERE id = %s AND kind = %s",
                (Json(resource.body), resource.archived_at, resource.id, resource.kind),
            )
            if cur.rowcount != 1:
                raise NotFound(f"{resource.kind} {resource.id} not found")

    async def delete_resource(self, kind: str, resource_id: str) -> bool:
        """Delete (an agent with its versions); False if absent."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(
                "DELETE FROM resources WHERE id = %s AND kind = %s", (resource_id, kind)
            )
            if kind == "agent":
                await conn.execute("DELETE FROM agent_versions WHERE agent_id = %s", (resource_id,))
            return cur.rowcount == 1

    async def list_resources(self, kind: str, page: Page) -> list[Resource]:
        """A page in id order."""
        where, args = page_where(page, "%s")
        async with self.pool.connection() as conn:
            rows = await q.fetchall(
                conn,
                f"SELECT {q.RESOURCE_COLUMNS} FROM resources WHERE kind = %s {where} "
                f"ORDER BY id {direction(page)} LIMIT %s",
                (kind, *args, page.limit + 1),
            )
        return [q.to_resource(r) for r in rows]

    async def put_agent_version(self, agent: Resource, expected_version: int | None) -> None:
        """Insert the next version and point the agent at it, under optimistic locking."""
        async with self.pool.connection() as conn, conn.transaction():
            await q.put_agent_version(conn, agent, expected_version)

    async def get_agent_version(self, agent_id: str, version: int) -> Resource | None:
        """A pinned version."""
        async with self.pool.connection() as conn:
            row = await q.fetchone(
                conn,
                f"SELECT {q.VERSION_COLUMNS} FROM agent_versions "
                "WHERE agent_id = %s AND version = %s",
                (agent_id, version),
            )
        return q.to_resource(row) if row else None

    async def list_agent_versions(self, agent_id: str, page: Page) -> list[Resource]:
        """Versions in number order."""
        op = "<" if page.order == "desc" else ">"
        after = int(page.after_id) if page.after_id else (10**9 if op == "<" else 0)
        async with self.pool.connection() as conn:
            rows = await q.fetchall(
                conn,
                f"SELECT {q.VERSION_COLUMNS} FROM agent_versions WHERE agent_id = %s "
                f"AND version {op} %s ORDER BY version {direction(page)} LIMIT %s",
                (agent_id, after, page.limit + 1),
            )
        return [q.to_resource(r) for r in rows]

    # ---- sessions ----------------------------------------------------------------------

    async def create_session(
        self, row: SessionRow, initial_events: Sequence[dict[str, Any]]
    ) -> None:
        """Insert the session and its initial events in one transaction."""
        bodies = [dict(e) for e in initial_events]
        try:
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(
                    f"INSERT INTO sessions ({q.SESSION_COLUMNS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    q.session_params(row),
                )
                if bodies:
                    await q.append_events(conn, row.id, bodies, None, True)
        except errors.UniqueViolation as exc:
            raise Conflict(f"session {row.id} already exists") from exc
        if bodies:
            self._work.signal()

    async def get_session(self, session_id: str) -> SessionRow | None:
        """The session or None."""
        async with self.pool.connection() as conn:
            r = await q.fetchone(
                conn, f"SELECT {q.SESSION_COLUMNS} FROM sessions WHERE id = %s", (session_id,)
            )
        return q.to_session(r) if r else None

    async def update_session(
        self, session_id: str, body: dict[str, Any], *, archived_at: str | None = None
    ) -> None:
        """Replace the body (and archive)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"UPDATE sessions SET body = %s, updated_at = {q.NOW_TEXT}, "
                "archived_at = coalesce(%s, archived_at) WHERE id = %s",
                (Json(body), archived_at, session_id),
            )
            if cur.rowcount != 1:
                raise NotFound(f"session {session_id} not found")

    async def delete_session(self, session_id: str) -> bool:
        """Delete row, log (cascade) and queue entry; followers everywhere get `SessionGone`."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute("DELETE FROM sessions WHERE id = %s", (session_id,))
            await conn.execute("DELETE FROM session_work WHERE session_id = %s", (session_id,))
            deleted = cur.rowcount == 1
            if deleted:
                await q.notify(conn, q.EVENTS_CHANNEL, f"{session_id}:{q.GONE}")
        if deleted:
            self.hub.publish(session_id, SessionGone())
        return deleted

    async def list_sessions(self, page: Page, where: SessionFilter) -> list[SessionRow]:
        """A filtered page in id order."""
        clause, args = q.session_where(where, *page_where(page, "%s"))
        async with self.pool.connection() as conn:
            rows = await q.fetchall(
                conn,
                f"SELECT {q.SESSION_COLUMNS} FROM sessions WHERE TRUE {clause} "
                f"ORDER BY id {direction(page)} LIMIT %s",
                (*args, page.limit + 1),
            )
        return [q.to_session(r) for r in rows]
