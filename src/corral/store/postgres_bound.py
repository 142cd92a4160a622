"""Time-bounded use of the PostgreSQL pool: no store wait outlasts `store_timeout_seconds`.

A database that stops answering (a black hole: the socket stays open, nothing comes back)
would otherwise hold a request until the client gives up, and the request would then go on
to COMMIT when the database came back: a write applied after the client saw an error, which
the SDK's retry would apply a second time.

Each `connection()` block gets a deadline. Past it a watchdog aborts the connection's socket
(shutdown, and a reset on close, so the kernel drops whatever was not yet sent); the pending
psycopg call fails at once and the connection is discarded, so nothing more is ever sent on
it. Cancelling the task instead would not do: psycopg answers a cancellation by sending a
cancel request and waiting up to 10 s for the server, which in a black hole never answers.

Whether the write was applied is known from what was in flight when the watchdog fired:
- nothing, or a statement inside `conn.transaction()` before its COMMIT: the transaction
  can never commit (the server rolls it back when the connection ends; server-side
  `idle_in_transaction_session_timeout` ends it even if the reset is lost): a clean 503;
- a COMMIT, or a single autocommit statement that writes (it commits by itself): it may
  have been applied, so the 503 says the outcome is unknown and tells the SDK not to retry
  (`StoreUnavailable(outcome_unknown=True)`). `TrackingCursor` records, per connection,
  whether the last statement sent writes and whether it was inside a transaction block
  (then a bare in-flight command is that block's COMMIT).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import struct
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus, TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from corral.errors import StoreUnavailable
from corral.store.postgres_sql import Conn

log = logging.getLogger("corral.store.postgres")


_WRITES = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE|TRUNCATE|CREATE|DROP|ALTER|PG_NOTIFY)\b", re.I)
"""Words of a statement that may change something (whole words: `updated_at` is a read)."""
_verdicts: dict[str, bool] = {}
"""Statement text -> whether it may write. The store's statements are a fixed set of texts
(values go in parameters), and the case-blind search of a long read that finds nothing cost
about 40 us a statement, a millisecond a turn on this VM; bounded by `_VERDICTS_MAX`."""
_VERDICTS_MAX = 1024


def _may_write(query: object) -> bool:
    """Whether `query` may change something (composed SQL objects are assumed to)."""
    if not isinstance(query, str):
        return True
    verdict = _verdicts.get(query)
    if verdict is None:
        verdict = _WRITES.search(query) is not None
        if len(_verdicts) < _VERDICTS_MAX:
            _verdicts[query] = verdict
    return verdict


_last_sent: weakref.WeakKeyDictionary[Any, tuple[bool, int]] = weakref.WeakKeyDictionary()
"""Connection -> (its last statement may write, transaction blocks open when it was sent)."""


class TrackingCursor(psycopg.AsyncCursor[TupleRow]):
    """Every store statement goes through here (`conn.execute` uses the connection's cursor
    factory): note what is about to be in flight, for the watchdog."""

    async def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> Self:
        _last_sent[self.connection] = (_may_write(query), self.connection._num_transactions)
        return await super().execute(query, params, prepare=prepare, binary=binary)


_LOG_EVERY = 60.0


def connect_options(url: str, bound: float) -> dict[str, str]:
    """libpq parameters: give up on a silent server's connection handshake too (unless the
    URL says otherwise)."""
    if "connect_timeout" in conninfo_to_dict(url):
        return {}
    return {"connect_timeout": str(max(int(bound), 2))}


def server_timeouts(bound: float) -> Callable[[Conn], Awaitable[None]]:
    """The pool's `configure` hook: the server gives up too. A statement is cancelled past
    the bound (a live but stuck server: lock waits), and a transaction left open by a client
    that vanished is ended soon after, releasing its locks. SET rather than the startup
    `options` parameter, which connection poolers such as PgBouncer refuse."""
    ms = max(int(bound * 1000), 1)

    async def configure(conn: Conn) -> None:
        await conn.execute(f"SET statement_timeout = {ms}")
        await conn.execute(f"SET idle_in_transaction_session_timeout = {2 * ms}")

    return configure


class BoundedPool:
    """The store's pool, handing out connections whose use is bounded in time."""

    def __init__(self, pool: AsyncConnectionPool[Conn], bound: float) -> None:
        self.raw = pool
        self.bound = bound
        self.aborted = 0
        """Connections reset by the watchdog so far."""
        self._told = (0, -_LOG_EVERY)  # (aborted, when) at the last warning

    async def close(self) -> None:
        """Close the pool."""
        await self.raw.close()

    @asynccontextmanager
    async def connection(self, bound: float | None = None) -> AsyncIterator[Conn]:
        """A pooled connection for at most `bound` seconds (default: the store's), waiting
        for it included; past that, `StoreUnavailable`."""
        limit = self.bound if bound is None else bound
        deadline = time.monotonic() + limit
        try:
            conn = await self.raw.getconn(timeout=limit)
        except PoolTimeout as exc:
            raise StoreUnavailable(
                f"the database did not answer within {limit:g} s (no connection); "
                "the request was not applied"
            ) from exc
        _last_sent[conn] = (False, 0)  # nothing sent yet in this use
        watchdog = _Watchdog(conn)
        handle = asyncio.get_running_loop().call_at(
            asyncio.get_running_loop().time() + max(deadline - time.monotonic(), 0.0),
            watchdog.fire,
        )
        swallowed = False
        try:
            yield conn
            swallowed = watchdog.fired  # the block caught the aborted call's error itself
        except psycopg.Error as exc:
            if watchdog.fired:
                raise watchdog.error(limit) from exc
            if conn.pgconn.status == ConnStatus.BAD:
                raise _lost(conn, exc) from exc
            raise
        finally:
            try:
                await self.raw.putconn(conn)  # a rollback of a stuck connection is bounded too
            finally:
                handle.cancel()
                if watchdog.fired:
                    self._note_abort(limit)
        if swallowed:
            raise watchdog.error(limit)

    def _note_abort(self, limit: float) -> None:
        """One warning a minute while the database stays silent, not one per request."""
        self.aborted += 1
        told, at = self._told
        if time.monotonic() - at >= _LOG_EVERY:
            log.warning(
                "the database did not answer within %g s: %d connection(s) reset, their "
                "requests answered 503",
                limit,
                self.aborted - told,
            )
            self._told = (self.aborted, time.monotonic())


def _lost(conn: Conn, exc: psycopg.Error) -> StoreUnavailable:
    """The connection died under a call (the server restarted, the network reset it). A
    commit may have been in flight when the last statement sent writes or belonged to a
    transaction block (whose COMMIT may be what failed)."""
    writes, depth = _last_sent.get(conn, (True, 0))
    if writes or depth > 0:
        return StoreUnavailable(
            f"the database connection was lost ({exc}); the request may or may not have "
            "been applied: check before retrying",
            outcome_unknown=True,
        )
    return StoreUnavailable(
        f"the database connection was lost ({exc}); the request was not applied"
    )


class _Watchdog:
    """Aborts a connection at its deadline and remembers what it interrupted."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.fired = False
        self.in_flight_commit = False

    def fire(self) -> None:
        pgconn = self.conn.pgconn
        if pgconn.status == ConnStatus.BAD or self.conn.closed:
            return
        self.fired = True
        # A command in flight (ACTIVE) outside any `transaction()` block is that block's
        # COMMIT (its counter drops before COMMIT is sent) or an autocommit statement.
        writes, depth = _last_sent.get(self.conn, (True, 0))
        self.in_flight_commit = (
            pgconn.transaction_status == TransactionStatus.ACTIVE
            and self.conn._num_transactions == 0
            and (depth > 0 or writes)
        )
        _reset(pgconn.socket)

    def error(self, limit: float) -> StoreUnavailable:
        if self.in_flight_commit:
            return StoreUnavailable(
                f"the database did not answer within {limit:g} s while committing; the "
                "request may or may not have been applied: check before retrying",
                outcome_unknown=True,
            )
        return StoreUnavailable(
            f"the database did not answer within {limit:g} s; the request was not applied"
        )


def _reset(fd: int) -> None:
    """Shut the socket down under libpq (which still owns `fd`) and make its close a reset,
    so data the kernel has not yet delivered is dropped rather than retransmitted."""
    sock = socket.socket(fileno=os.dup(fd))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already gone: the pending call fails by itself
    finally:
        sock.close()
