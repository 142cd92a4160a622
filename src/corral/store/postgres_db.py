"""PostgreSQL plumbing: versioned migrations, notification payloads and the LISTEN loop.

Notifications only say "look again": the log stays the source of truth, so a lost one is
repaired by a resync after reconnecting. Knows no table semantics beyond `schema_version`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from corral.session.hub import Hub
from corral.session.log import NewEvents, Preview, SessionGone, Signal
from corral.store.postgres_sql import (
    EVENTS_CHANNEL,
    GONE,
    PREVIEWS_CHANNEL,
    WORK_CHANNEL,
    Conn,
    fetchone,
)
from corral.store.schema import check_not_newer, scripts

log = logging.getLogger("corral.store.postgres")

_MIGRATION_LOCK = 0x636F7272616C  # "corral": one advisory lock id for every process
NOTIFY_LIMIT = 7900
"""Postgres rejects payloads of 8000 bytes or more; leave room for the channel framing."""
_HEALTH_SECONDS = 30.0
_BACKOFF_MAX = 2.0
_RETRY_SECONDS = 0.05


async def migrate(conn: Conn) -> int:
    """Apply pending `migrations/postgres/*.sql` in one transaction; return the version.

    The transaction-scoped advisory lock makes processes starting together apply each script
    once: the others wait, then see the new version.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
            "applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
        )
        row = await fetchone(conn, "SELECT coalesce(max(version), 0) FROM schema_version")
        current = int(row[0]) if row else 0
        check_not_newer(current, "postgres", _where(conn))
        for version, script in _scripts():
            if version <= current:
                continue
            await conn.execute(script)
            await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version,))
            current = version
    return current


def _scripts() -> list[tuple[int, str]]:
    return [(version, item.read_text()) for version, item in scripts("postgres")]


def _where(conn: Conn) -> str:
    """The database as an operator names it (no password)."""
    info = conn.info
    return f"PostgreSQL database {info.dbname!r} on {info.host}:{info.port}"


def preview_payloads(origin: str, session_id: str, body: dict[str, Any]) -> list[str]:
    """`corral_previews` payloads for one preview, each under the notify limit.

    A text delta too large for one notification is split into several deltas (followers
    concatenate them into the same text); any other oversized preview is skipped, which is
    safe because previews are never stored and the final event follows in the log.
    """
    whole = _preview(origin, session_id, body)
    if len(whole.encode()) <= NOTIFY_LIMIT:
        return [whole]
    text = _delta_text(body)
    if text is None:
        return []

    def with_text(piece: str) -> dict[str, Any]:
        delta = body["delta"]
        return {**body, "delta": {**delta, "content": {**delta["content"], "text": piece}}}

    room = NOTIFY_LIMIT - len(_preview(origin, session_id, with_text("")).encode())
    step = room // 12  # worst case: a non-BMP character escapes to two \uXXXX (12 bytes)
    if step < 1:
        return []
    return [
        _preview(origin, session_id, with_text(text[i : i + step]))
        for i in range(0, len(text), step)
    ]


def _delta_text(body: dict[str, Any]) -> str | None:
    if body.get("type") != "event_delta":
        return None
    delta = body.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) else None


def _preview(origin: str, session_id: str, body: dict[str, Any]) -> str:
    return json.dumps({"o": origin, "s": session_id, "b": body}, separators=(",", ":"))


class Listener:
    """One LISTEN connection feeding this process's hub; reconnects and resyncs on loss.

    It runs as an asyncio task between `start()` and `stop()` (the store is opened and closed
    by different calls, so no task group spans its life; psycopg's async API is asyncio-only).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        origin: str,
        hub: Hub,
        on_work: Callable[[], None],
        resync: Callable[[list[str]], Awaitable[None]],
        on_events: Callable[[str, Signal], None] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._origin = origin
        self._hub = hub
        self._on_events = on_events if on_events is not None else hub.publish
        """Where a log's notifications go (the store may hold back its own appends' echoes)."""
        self._on_work = on_work
        self._resync = resync
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0
        self.backend_pid: int | None = None
        self.application_name = f"corral-listener-{origin}"

    async def start(self) -> None:
        """Connect and LISTEN (raising if the database is unreachable), then run in the back."""
        conn = await self._connect()
        self._task = asyncio.create_task(self._run(conn), name=self.application_name)

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})  # unlike `await task`, keeps our own cancellation

    async def _connect(self) -> Conn:
        conn = await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, application_name=self.application_name
        )
        try:
            for channel in (EVENTS_CHANNEL, PREVIEWS_CHANNEL, WORK_CHANNEL):
                await conn.execute(f"LISTEN {channel}")
        except BaseException:
            await conn.close()
            raise
        self.backend_pid = conn.info.backend_pid
        return conn

    async def _run(self, conn: Conn) -> None:
        while True:
            try:
                # Whatever was notified while we were not listening is in the log: make every
                # follower look again, and let idle workers try to claim.
                await self._resync(self._hub.session_ids())
                self._on_work()
                await self._pump(conn)
            except Exception as exc:  # the listener must outlive any connection failure
                log.warning("LISTEN connection lost (%s); reconnecting", exc)
            finally:
                await conn.close()
            await asyncio.sleep(_RETRY_SECONDS)  # no busy loop if the resync keeps failing
            conn = await self._reconnect()
            self.reconnects += 1

    async def _pump(self, conn: Conn) -> None:
        while True:
            async for note in conn.notifies(timeout=_HEALTH_SECONDS):
                self._dispatch(note.channel, note.payload)
            # A silent connection may be a dead one: probe it so we notice and reconnect.
            async with asyncio.timeout(_HEALTH_SECONDS):
                await conn.execute("SELECT 1")

    async def _reconnect(self) -> Conn:
        delay = 0.05
        while True:
            try:
                return await self._connect()
            except Exception as exc:
                log.warning("LISTEN reconnect failed (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX)

    def _dispatch(self, channel: str, payload: str) -> None:
        try:
            if channel == EVENTS_CHANNEL:
                session_id, _, tail = payload.rpartition(":")
                signal = SessionGone() if tail == GONE else NewEvents(last_seq=int(tail))
                self._on_events(session_id, signal)
            elif channel == PREVIEWS_CHANNEL:
                data = json.loads(payload)
                if data["o"] != self._origin:  # our own previews went to the hub directly
                    self._hub.publish(str(data["s"]), Preview(body=data["b"]))
            elif channel == WORK_CHANNEL:
                self._on_work()
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed %s notification %r", channel, payload[:200])
