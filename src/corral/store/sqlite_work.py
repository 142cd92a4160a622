"""`WorkItems` on the embedded store: every change runs on the single writer connection, so two
polls are serialised and never hand out one item at once. The clock is this process's (the
embedded store has one process), as for session leases."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio

from corral.errors import NotFound
from corral.ids import new_id
from corral.store import work_base as wb
from corral.store.sqlite_db import SqliteDatabase
from corral.store.work_base import EnvironmentKey, HeartbeatResult, WorkRow, WorkStats

T = TypeVar("T")


class SqliteWorkItems:
    """The work queue and environment keys in the store's SQLite file."""

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db
        self._queued = anyio.Event()

    async def ensure_work(
        self, environment_id: str, session_id: str, ttl_seconds: int
    ) -> WorkRow | None:
        """See `WorkItems.ensure_work`."""
        work_id = new_id("work")

        def run(conn: sqlite3.Connection) -> WorkRow | None:
            cur = conn.execute(
                "INSERT INTO work_items (id, environment_id, session_id, state, ttl_seconds, "
                "created_at) VALUES (?, ?, ?, 'queued', ?, ?) "
                "ON CONFLICT (session_id) WHERE state <> 'stopped' DO NOTHING",
                (work_id, environment_id, session_id, ttl_seconds, time.time()),
            )
            return _get(conn, work_id) if cur.rowcount else None

        row = await self.db.write(run)
        if row is not None:
            self._queued.set()
            self._queued = anyio.Event()
        return row

    async def poll_work(
        self,
        environment_id: str,
        *,
        worker_id: str | None,
        reclaim_after: float,
        token_hash: str,
    ) -> WorkRow | None:
        """See `WorkItems.poll_work`."""

        def run(conn: sqlite3.Connection) -> WorkRow | None:
            now = time.time()
            if worker_id:
                conn.execute(
                    "INSERT INTO work_pollers (environment_id, worker_id, polled_at) "
                    "VALUES (?, ?, ?) ON CONFLICT (environment_id, worker_id) "
                    "DO UPDATE SET polled_at = excluded.polled_at",
                    (environment_id, worker_id, now),
                )
            found = conn.execute(
                "SELECT id FROM work_items WHERE environment_id = ? AND state = 'queued' "
                "AND (polled_at IS NULL OR polled_at < ?) ORDER BY created_at, id LIMIT 1",
                (environment_id, now - reclaim_after),
            ).fetchone()
            if found is None:
                return None
            conn.execute(
                "UPDATE work_items SET polled_at = ?, token_hash = ? WHERE id = ?",
                (now, token_hash, found[0]),
            )
            return _get(conn, found[0])

        return await self.db.write(run)

    async def wait_for_queued(self, timeout: float) -> None:
        """See `WorkItems.wait_for_queued`."""
        with anyio.move_on_after(timeout):
            await self._queued.wait()

    async def ack_work(self, environment_id: str, work_id: str) -> WorkRow:
        """See `WorkItems.ack_work`."""
        return await self._transition(environment_id, work_id, wb.ack)

    async def heartbeat_work(
        self, environment_id: str, work_id: str, *, expected: str | None, ttl_seconds: int | None
    ) -> HeartbeatResult:
        """See `WorkItems.heartbeat_work`."""

        def run(conn: sqlite3.Connection) -> HeartbeatResult:
            row = _owned(conn, environment_id, work_id)
            updates, extended = wb.heartbeat(row, expected, ttl_seconds, time.time())
            return HeartbeatResult(row=_update(conn, row.id, updates), lease_extended=extended)

        return await self.db.write(run)

    async def stop_work(self, environment_id: str, work_id: str, *, force: bool) -> WorkRow:
        """See `WorkItems.stop_work`."""
        return await self._transition(
            environment_id, work_id, lambda row, now: wb.stop(row, force, now)
        )

    async def update_work_metadata(
        self, environment_id: str, work_id: str, patch: Mapping[str, str | None]
    ) -> WorkRow:
        """See `WorkItems.update_work_metadata`."""
        return await self._transition(
            environment_id,
            work_id,
            lambda row, _: {"metadata": json.dumps(wb.patched(row.metadata, patch))},
        )

    async def _transition(
        self,
        environment_id: str,
        work_id: str,
        change: Callable[[WorkRow, float], dict[str, Any]],
    ) -> WorkRow:
        def run(conn: sqlite3.Connection) -> WorkRow:
            row = _owned(conn, environment_id, work_id)
            return _update(conn, row.id, change(row, time.time()))

        return await self.db.write(run)

    async def get_work(self, work_id: str) -> WorkRow | None:
        """See `WorkItems.get_work`."""
        return await self.db.read(lambda c: _get(c, work_id))

    async def list_work(
        self, environment_id: str, *, after_id: str | None, limit: int
    ) -> list[WorkRow]:
        """See `WorkItems.list_work`."""

        def run(conn: sqlite3.Connection) -> list[WorkRow]:
            sql = f"SELECT {wb.WORK_COLUMNS} FROM work_items WHERE environment_id = ?"
            args: list[Any] = [environment_id]
            if after_id is not None:
                sql += " AND id < ?"
                args.append(after_id)
            sql += " ORDER BY id DESC LIMIT ?"
            args.append(limit + 1)
            return [_row(r) for r in conn.execute(sql, args).fetchall()]

        return await self.db.read(run)

    async def work_stats(self, environment_id: str) -> WorkStats:
        """See `WorkItems.work_stats`."""

        def run(conn: sqlite3.Connection) -> WorkStats:
            depth, pending, oldest = conn.execute(
                "SELECT count(*) FILTER (WHERE polled_at IS NULL), "
                "count(*) FILTER (WHERE polled_at IS NOT NULL), min(created_at) "
                "FROM work_items WHERE environment_id = ? AND state = 'queued'",
                (environment_id,),
            ).fetchone()
            polling = conn.execute(
                "SELECT count(*) FROM work_pollers WHERE environment_id = ? AND polled_at > ?",
                (environment_id, time.time() - wb.POLLERS_WINDOW_SECONDS),
            ).fetchone()[0]
            return WorkStats(
                depth=int(depth),
                pending=int(pending),
                oldest_queued_at=None if oldest is None else float(oldest),
                workers_polling=int(polling),
            )

        return await self.db.read(run)

    async def work_token(self, work_id: str) -> tuple[WorkRow, str | None] | None:
        """See `WorkItems.work_token`."""

        def run(conn: sqlite3.Connection) -> tuple[WorkRow, str | None] | None:
            found = conn.execute(
                f"SELECT {wb.WORK_COLUMNS}, token_hash FROM work_items WHERE id = ?", (work_id,)
            ).fetchone()
            return None if found is None else (_row(found[:-1]), found[-1])

        return await self.db.read(run)

    async def live_work_for_session(self, session_id: str) -> WorkRow | None:
        """See `WorkItems.live_work_for_session`."""

        def run(conn: sqlite3.Connection) -> WorkRow | None:
            found = conn.execute(
                f"SELECT {wb.WORK_COLUMNS} FROM work_items "
                "WHERE session_id = ? AND state <> 'stopped'",
                (session_id,),
            ).fetchone()
            return None if found is None else _row(found)

        return await self.db.read(run)

    async def expire_work(self) -> list[WorkRow]:
        """See `WorkItems.expire_work`."""

        def run(conn: sqlite3.Connection) -> list[WorkRow]:
            now = time.time()
            conn.execute(
                "UPDATE work_items SET state = 'stopped', stopped_at = ?, lease_lost = 1 "
                "WHERE state IN ('starting', 'active', 'stopping') AND lease_expires < ?",
                (now, now),
            )
            rows = conn.execute(
                f"SELECT {wb.WORK_COLUMNS} FROM work_items "
                "WHERE lease_lost = 1 AND lost_reported = 0 ORDER BY id"
            ).fetchall()
            return [_row(r) for r in rows]

        return await self.db.write(run)

    async def mark_lost_reported(self, work_id: str) -> None:
        """See `WorkItems.mark_lost_reported`."""
        await self.db.write(
            lambda c: (
                c.execute(
                    "UPDATE work_items SET lost_reported = 1 WHERE id = ?", (work_id,)
                ).rowcount
            )
        )

    async def add_environment_key(self, key: EnvironmentKey) -> None:
        """See `WorkItems.add_environment_key`."""
        await self.db.write(
            lambda c: (
                c.execute(
                    "INSERT INTO environment_keys (id, environment_id, key_hash, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (key.id, key.environment_id, key.key_hash, key.created_at),
                ).rowcount
            )
        )

    async def get_environment_key(self, key_id: str) -> EnvironmentKey | None:
        """See `WorkItems.get_environment_key`."""

        def run(conn: sqlite3.Connection) -> EnvironmentKey | None:
            found = conn.execute(
                "SELECT id, environment_id, key_hash, created_at, revoked_at "
                "FROM environment_keys WHERE id = ?",
                (key_id,),
            ).fetchone()
            return None if found is None else _key(found)

        return await self.db.read(run)

    async def list_environment_keys(self, environment_id: str) -> list[EnvironmentKey]:
        """See `WorkItems.list_environment_keys`."""

        def run(conn: sqlite3.Connection) -> list[EnvironmentKey]:
            rows = conn.execute(
                "SELECT id, environment_id, key_hash, created_at, revoked_at "
                "FROM environment_keys WHERE environment_id = ? ORDER BY id",
                (environment_id,),
            ).fetchall()
            return [_key(r) for r in rows]

        return await self.db.read(run)

    async def revoke_environment_key(self, key_id: str, revoked_at: str) -> bool:
        """See `WorkItems.revoke_environment_key`."""
        count = await self.db.write(
            lambda c: (
                c.execute(
                    "UPDATE environment_keys SET revoked_at = ? "
                    "WHERE id = ? AND revoked_at IS NULL",
                    (revoked_at, key_id),
                ).rowcount
            )
        )
        return bool(count)


def _row(values: Any) -> WorkRow:
    return wb.row_from(tuple(values), json.loads(values[4]))


def _key(values: Any) -> EnvironmentKey:
    return EnvironmentKey(
        id=values[0],
        environment_id=values[1],
        key_hash=values[2],
        created_at=values[3],
        revoked_at=values[4],
    )


def _get(conn: sqlite3.Connection, work_id: str) -> WorkRow | None:
    found = conn.execute(
        f"SELECT {wb.WORK_COLUMNS} FROM work_items WHERE id = ?", (work_id,)
    ).fetchone()
    return None if found is None else _row(found)


def _owned(conn: sqlite3.Connection, environment_id: str, work_id: str) -> WorkRow:
    """The item if it belongs to the environment; another environment's item is not found."""
    row = _get(conn, work_id)
    if row is None or row.environment_id != environment_id:
        raise NotFound(f"work {work_id} not found in environment {environment_id}")
    return row


def _update(conn: sqlite3.Connection, work_id: str, updates: dict[str, Any]) -> WorkRow:
    if updates:
        columns = ", ".join(f"{name} = ?" for name in updates)
        conn.execute(f"UPDATE work_items SET {columns} WHERE id = ?", (*updates.values(), work_id))
    row = _get(conn, work_id)
    assert row is not None
    return row
