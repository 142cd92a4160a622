"""`SqliteStore`: the embedded default backend (one WAL file, one process).

Leases use this process's wall clock; the fence check runs inside the append's transaction.
Appends read and write the session row through `_Heads`, the single writer's cache of it,
written back once per group commit.
"""

from __future__ import annotations

import json
import json.encoder
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import anyio

from corral.errors import Conflict, LeaseLost, NotFound, StoreUnavailable
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
from corral.session.projection import (
    CallBook,
    project,
    referenced_calls,
    touches_calls,
    touches_summary,
)
from corral.session.queue import QueueStatus
from corral.store import sqlite_calls
from corral.store.base import EventCheck, Page, Resource, SessionFilter, SessionRow
from corral.store.sqlite_db import SqliteDatabase
from corral.store.sqlite_memory import SqliteMemories
from corral.store.wakeups import WorkSignal
from corral.wire.events import INTERNAL_EVENT_TYPES

_SESSION_COLUMNS = (
    "id, created_at, updated_at, archived_at, environment_id, agent_id, agent_version, "
    "status, body, usage, stats, parent_id"
)


def _touch_schema(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone()


class SqliteStore(SqliteMemories):
    """Event log, wake queue and resources in one SQLite file."""

    def __init__(self, path: Path, *, fencing: bool = True, store_timeout: float = 30.0) -> None:
        self._heads = _Heads()  # touched only inside write transactions (one at a time)
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
            lambda c: _append(c, heads, session_id, bodies, fence, wake, check=fencing)
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
            lambda c: _append(c, heads, session_id, bodies, None, wake, validate=check)
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

        An ascending slice's first `_INLINE_ROWS` rows are read on the caller's thread (the
        brain's read of what a client just sent is one or two events: not worth a hand-off to
        a worker thread); the rest, if any, on a worker thread, from a snapshot as late or
        later, which is still the same log continued since seqs are only appended.
        """
        if query.order != "asc" or (query.limit is not None and query.limit < 1):
            return await self.db.read(lambda c: _read_events(c, session_id, query))
        head = _INLINE_ROWS if query.limit is None else min(query.limit, _INLINE_ROWS)
        first = self.db.read_now(lambda c: _read_events(c, session_id, replace(query, limit=head)))
        if len(first) < head or query.limit == head:
            return first
        rest = replace(
            query,
            after_seq=first[-1].seq,
            limit=None if query.limit is None else query.limit - head,
        )
        return first + await self.db.read(lambda c: _read_events(c, session_id, rest))

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
        await self.db.write(lambda c: _mark_pending(c, session_id, due))
        self._work.signal()

    async def claim(self, owner: str, lease_seconds: float) -> Fence | None:
        """Take one due session atomically (the single writer serialises claims)."""
        found = await self.claim_many(owner, lease_seconds, 1)
        return found[0] if found else None

    async def claim_many(self, owner: str, lease_seconds: float, limit: int) -> list[Fence]:
        """Take up to `limit` due sessions in one transaction."""
        self._work.claiming()
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
                f"INSERT INTO sessions ({_SESSION_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
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
            return _append(conn, self._heads, row.id, bodies, None, True) if bodies else []

        await self.db.write(run)
        if bodies:
            self._work.signal()

    async def get_session(self, session_id: str) -> SessionRow | None:
        """The session or None."""

        def run(conn: sqlite3.Connection) -> SessionRow | None:
            r = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return _session(r) if r else None

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


class _Head(NamedTuple):
    """The session-row columns an append reads and writes. Immutable: an append installs a new
    one, so that dropping a transaction's heads undoes it."""

    last_seq: int
    status: str
    usage: str  # JSON text, as stored: re-encoded only when an event changes it
    stats: str
    interrupt_pending: bool
    updated_at: str | None


_HEAD_SELECT = (
    "SELECT last_seq, status, usage, stats, interrupt_pending, updated_at FROM sessions "
    "WHERE id = ?"
)
_HEAD_UPDATE = (
    "UPDATE sessions SET last_seq = ?, status = ?, usage = ?, stats = ?, interrupt_pending = ?, "
    "updated_at = ? WHERE id = ?"
)
_ENCODER = json.JSONEncoder(separators=(",", ":"), check_circular=False)


def _c_encoder(encoder: json.JSONEncoder) -> Callable[[Any, int], list[str]] | None:
    """The C encoder `encoder.encode` builds anew for every call (about half the cost of
    encoding a small event), built once; None where the C accelerator is missing."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    ensure_ascii = json.encoder.encode_basestring_ascii  # as `encoder` (ensure_ascii=True)
    return make(  # type: ignore[no-any-return]
        None,  # no markers: no cycle check (check_circular=False)
        encoder.default,
        ensure_ascii,
        None,  # no indent
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )


_C_ENCODE = _c_encoder(_ENCODER)


def _encode(value: dict[str, Any]) -> str:
    """JSON text of a logged event (compact: fewer bytes to fsync; bodies come from JSON, so
    they have no cycles to check for), exactly as `_ENCODER.encode` writes it."""
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


_INLINE_ROWS = 16
_HEADS_KEPT = 10_000  # committed heads kept between transactions, least recently used dropped


class _Heads:
    """The single writer's cache of session rows, and its transaction's timestamp
    (`sqlite_db.TransactionHooks`).

    Nothing but the writer connection writes the file in the embedded deployment, so after a commit
    the cache equals the rows; `PRAGMA data_version` still tells at each BEGIN whether another
    connection committed since (a second process, a test editing the file): then the cache is
    dropped. A transaction's new heads stay in `dirty` until they are written back with one
    UPDATE per session just before COMMIT, and are only then kept; any failure of the
    transaction drops every head, so the next append reads the row again.

    `now` is read once per transaction: every event the transaction logs is processed at the
    same instant, as with the events of one append.
    """

    def __init__(self) -> None:
        self._clean: dict[str, _Head] = {}
        self.dirty: dict[str, _Head] = {}
        self._data_version: int | None = None
        self.now = ""

    def get(self, conn: sqlite3.Connection, session_id: str) -> _Head | None:
        """The session's head as of this point of the transaction; None if no such session."""
        head = self.dirty.get(session_id) or self._clean.get(session_id)
        if head is not None:
            return head
        row = conn.execute(_HEAD_SELECT, (session_id,)).fetchone()
        if row is None:
            return None
        return _Head(int(row[0]), row[1], row[2], row[3], bool(row[4]), row[5])

    def put(self, session_id: str, head: _Head) -> None:
        """Install the head an append produced (its last step: see `TransactionHooks`)."""
        self.dirty[session_id] = head

    def forget(self, session_id: str) -> None:
        """The row is gone (or changed behind the cache's back)."""
        self.dirty.pop(session_id, None)
        self._clean.pop(session_id, None)

    def begin(self, conn: sqlite3.Connection) -> None:
        self.now = now_rfc3339()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._clean.clear()
            self._data_version = version

    def before_commit(self, conn: sqlite3.Connection) -> None:
        if self.dirty:
            conn.executemany(
                _HEAD_UPDATE,
                [
                    (
                        h.last_seq,
                        h.status,
                        h.usage,
                        h.stats,
                        int(h.interrupt_pending),
                        h.updated_at,
                        sid,
                    )
                    for sid, h in self.dirty.items()
                ],
            )

    def committed(self) -> None:
        clean = self._clean
        for session_id, head in self.dirty.items():
            clean.pop(session_id, None)  # re-inserted last: most recently used
            clean[session_id] = head
        self.dirty.clear()
        while len(clean) > _HEADS_KEPT:
            del clean[next(iter(clean))]

    def rolled_back(self) -> None:
        self.dirty.clear()
        self._clean.clear()


def _append(
    conn: sqlite3.Connection,
    heads: _Heads,
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
    head = heads.get(conn, session_id)
    if head is None:
        raise NotFound(f"session {session_id} not found")
    if fence is not None and check:
        _check_fence(conn, fence)
    book = None
    if validate is not None or touches_calls(bodies):  # most events never touch a call
        book = CallBook(
            session_id=session_id, status=head.status, interrupt_pending=head.interrupt_pending
        )
        sqlite_calls.load_calls(conn, book, referenced_calls(bodies))
        for index, body in enumerate(bodies):
            if validate is not None:
                validate(book, index, body)
            book.apply(index, body)
    now = heads.now
    stored = _insert_events(conn, session_id, head.last_seq, bodies, fence, now)
    if book is not None:
        sqlite_calls.save_calls(conn, book)
    status, usage, stats = _summarise(head, bodies)
    if wake:
        _mark_pending(conn, session_id, time.time())
    pending = book.interrupt_pending if book is not None else head.interrupt_pending
    heads.put(session_id, _Head(head.last_seq + len(bodies), status, usage, stats, pending, now))
    return stored


def _insert_events(
    conn: sqlite3.Connection,
    session_id: str,
    last_seq: int,
    bodies: list[dict[str, Any]],
    fence: Fence | None,
    now: str,
) -> list[StoredEvent]:
    owner, token = (fence.owner, fence.token) if fence is not None else (None, None)
    stored = []
    seq = last_seq
    for body in bodies:
        seq += 1
        body.setdefault("processed_at", now)
        try:
            conn.execute(
                "INSERT INTO events (session_id, seq, id, type, created_at, body, writer_owner, "
                "writer_token) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (session_id, seq, body["id"], body["type"], now, _encode(body), owner, token),
            )
        except sqlite3.IntegrityError as exc:
            raise Conflict(f"event id {body['id']} already exists") from exc
        stored.append(StoredEvent(session_id=session_id, seq=seq, body=body))
    return stored


def _summarise(head: _Head, bodies: list[dict[str, Any]]) -> tuple[str, str, str]:
    """Status, usage and stats (JSON) of the row after `bodies` (stamped already)."""
    if not touches_summary(bodies):
        return head.status, head.usage, head.stats
    summary = SessionSummary(
        status=head.status, usage=json.loads(head.usage), stats=json.loads(head.stats)
    )
    for body in bodies:
        project(summary, body)
    return summary.status, _encode(summary.usage), _encode(summary.stats)


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
        "SELECT session_id, token, owner IS NOT NULL FROM session_work WHERE "
        "(pending = 1 AND due_at <= ? AND (owner IS NULL OR lease_expires < ?)) "
        "OR (owner IS NOT NULL AND lease_expires < ?) ORDER BY due_at LIMIT ?",
        (now, now, now, max(limit, 1)),
    ).fetchall()
    fences = []
    for session_id, token, taken in rows:  # an owner left on the row: its lease expired
        conn.execute(
            "UPDATE session_work SET owner = ?, token = ?, lease_expires = ?, pending = 0 "
            "WHERE session_id = ?",
            (owner, int(token) + 1, now + lease_seconds, session_id),
        )
        fence = Fence(
            session_id=session_id, owner=owner, token=int(token) + 1, takeover=bool(taken)
        )
        fences.append(fence)
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
    if where.parent_id is None:
        clause += " AND parent_id IS NULL"
    else:
        clause += " AND parent_id = ?"
        args.append(where.parent_id)
    if where.agent_id is not None:
        clause += " AND agent_id = ?"
        args.append(where.agent_id)
    if where.agent_version is not None:
        clause += " AND agent_version = ?"
        args.append(where.agent_version)
    if where.environment_id is not None:
        clause += " AND environment_id = ?"
        args.append(where.environment_id)
    if where.memory_store_id is not None:
        clause += (
            " AND EXISTS (SELECT 1 FROM json_each(body, '$.resources') AS r WHERE "
            "json_extract(r.value, '$.type') = 'memory_store' AND "
            "json_extract(r.value, '$.memory_store_id') = ?)"
        )
        args.append(where.memory_store_id)
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
        parent_id=r[11],
    )
