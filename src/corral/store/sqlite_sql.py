"""SQL of `SqliteStore`: statements, row mapping and the single writer's cache of session
rows, run on a connection inside the caller's transaction (no threads, no hub here)."""

from __future__ import annotations

import json
import json.encoder
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from corral.errors import Conflict, LeaseLost, NotFound
from corral.ids import now_rfc3339
from corral.session.log import (
    EventQuery,
    Fence,
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
from corral.store import sqlite_calls
from corral.store.base import EventCheck, Resource, SessionFilter, SessionRow
from corral.store.sql_filters import event_where, session_columns_where
from corral.wire.events import INTERNAL_EVENT_TYPES

SESSION_COLUMNS = (
    "id, created_at, updated_at, archived_at, environment_id, agent_id, agent_version, "
    "status, body, usage, stats, parent_id"
)


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


INLINE_ROWS = 16
_HEADS_KEPT = 10_000  # committed heads kept between transactions, least recently used dropped


class Heads:
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


def append_events(
    conn: sqlite3.Connection,
    heads: Heads,
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
        mark_pending(conn, session_id, time.time())
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


def mark_pending(conn: sqlite3.Connection, session_id: str, due: float) -> None:
    conn.execute(
        "INSERT INTO session_work (session_id, pending, due_at) VALUES (?, 1, ?) "
        "ON CONFLICT (session_id) DO UPDATE SET pending = 1, "
        "due_at = CASE WHEN session_work.pending = 1 THEN min(session_work.due_at, excluded.due_at)"
        " ELSE excluded.due_at END",
        (session_id, due),
    )


def claim_work(
    conn: sqlite3.Connection, owner: str, lease_seconds: float, limit: int
) -> list[Fence]:
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


def put_agent_version(
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


def read_events(conn: sqlite3.Connection, session_id: str, query: EventQuery) -> list[StoredEvent]:
    clauses, args = event_where(session_id, query, "?")
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


def session_where(where: SessionFilter, clause: str, args: list[Any]) -> tuple[str, list[Any]]:
    """Extend `page_where`'s clauses with every `sessions.list` filter (SQLite's JSON)."""
    clause, args = session_columns_where(where, clause, args, "?")
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


def to_resource(row: Sequence[Any]) -> Resource:
    return Resource(
        id=row[0], kind=row[1], created_at=row[2], archived_at=row[3], body=json.loads(row[4])
    )


def to_session(r: Sequence[Any]) -> SessionRow:
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
