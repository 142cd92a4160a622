"""PostgreSQL SQL of the tool-call projection (`tool_calls` rows, `sessions.interrupt_pending`).

Runs inside the caller's transaction (an append's, under the session row's lock). What an event
does to a call is `session.projection.CallBook`'s business; this module only loads and stores
rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from corral.session.projection import Call, CallBook

Conn = AsyncConnection[TupleRow]
_COLUMNS = "event_id, kind, permission, confirmation, state"


async def load_calls(conn: Conn, book: CallBook, ids: Sequence[str] | None) -> None:
    """Put the calls `ids` (every call of the session when None) into `book.calls`."""
    if ids is not None and not ids:
        return
    sql = f"SELECT {_COLUMNS} FROM tool_calls WHERE session_id = %s"
    args: list[Any] = [book.session_id]
    if ids is not None:
        sql += " AND event_id = ANY(%s)"
        args.append(list(ids))
    cur = await conn.execute(sql, args)
    for row in await cur.fetchall():
        book.calls[row[0]] = Call(row[0], row[1], row[2], row[3], row[4])


async def save_calls(conn: Conn, book: CallBook) -> None:
    """Write back what the append changed.

    A closed turn abandons every open call first, loaded or not; the changed calls are then
    written with their final state, which overrides that for calls answered or created in
    this append (the book already applied the close to the calls it holds).
    """
    if book.closed_turn:
        await conn.execute(
            "UPDATE tool_calls SET state = 'abandoned' WHERE session_id = %s AND state = 'open'",
            (book.session_id,),
        )
    if not book.changed:
        return
    async with conn.cursor() as cur:
        await cur.executemany(
            f"INSERT INTO tool_calls (session_id, {_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (session_id, event_id) DO UPDATE SET "
            "confirmation = excluded.confirmation, state = excluded.state",
            [
                (book.session_id, c.event_id, c.kind, c.permission, c.confirmation, c.state)
                for c in (book.calls[i] for i in sorted(book.changed))
            ],
        )


async def read_calls(conn: Conn, session_id: str, ids: Sequence[str] | None) -> CallBook | None:
    """The session's projection with the calls `ids` (all when None); None if no session."""
    cur = await conn.execute(
        "SELECT status, interrupt_pending FROM sessions WHERE id = %s", (session_id,)
    )
    row = await cur.fetchone()
    if row is None:
        return None
    book = CallBook(session_id=session_id, status=row[0], interrupt_pending=bool(row[1]))
    await load_calls(conn, book, ids)
    return book
