"""`WorkItems` on PostgreSQL: the database's clock for every time and lease, row locks for
transitions, and `FOR UPDATE SKIP LOCKED` so concurrent polls (any process) never hand out
one item at once."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from corral.errors import NotFound
from corral.ids import new_id
from corral.store import postgres_sql as q
from corral.store import work_base as wb
from corral.store.postgres_bound import BoundedPool
from corral.store.work_base import EnvironmentKey, HeartbeatResult, WorkRow, WorkStats

NOW = "extract(epoch from clock_timestamp())::double precision"
"""The database clock as epoch seconds, the unit every work time is stored in."""
POLL_RECHECK_SECONDS = 0.1
"""Long polls re-check this often: another process may have queued the item."""


class PostgresWorkItems:
    """The work queue and environment keys in the store's PostgreSQL database."""

    def __init__(self, pool: Callable[[], BoundedPool]) -> None:
        self._pool = pool
        self._queued = anyio.Event()

    async def ensure_work(
        self, environment_id: str, session_id: str, ttl_seconds: int
    ) -> WorkRow | None:
        """See `WorkItems.ensure_work`."""
        async with self._pool().connection() as conn:
            found = await q.fetchone(
                conn,
                f"INSERT INTO work_items (id, environment_id, session_id, state, ttl_seconds, "
                f"created_at) VALUES (%s, %s, %s, 'queued', %s, {NOW}) "
                f"ON CONFLICT (session_id) WHERE state <> 'stopped' DO NOTHING "
                f"RETURNING {wb.WORK_COLUMNS}",
                (new_id("work"), environment_id, session_id, ttl_seconds),
            )
        if found is None:
            return None
        self._queued.set()
        self._queued = anyio.Event()
        return _row(found)

    async def poll_work(
        self,
        environment_id: str,
        *,
        worker_id: str | None,
        reclaim_after: float,
        token_hash: str,
    ) -> WorkRow | None:
        """See `WorkItems.poll_work`."""
        async with self._pool().connection() as conn, conn.transaction():
            if worker_id:
                await conn.execute(
                    f"INSERT INTO work_pollers (environment_id, worker_id, polled_at) "
                    f"VALUES (%s, %s, {NOW}) ON CONFLICT (environment_id, worker_id) "
                    f"DO UPDATE SET polled_at = excluded.polled_at",
                    (environment_id, worker_id),
                )
            found = await q.fetchone(
                conn,
                f"UPDATE work_items SET polled_at = {NOW}, token_hash = %s WHERE id = ("
                f"SELECT id FROM work_items WHERE environment_id = %s AND state = 'queued' "
                f"AND (polled_at IS NULL OR polled_at < {NOW} - %s) "
                f"ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
                f"RETURNING {wb.WORK_COLUMNS}",
                (token_hash, environment_id, reclaim_after),
            )
        return None if found is None else _row(found)

    async def wait_for_queued(self, timeout: float) -> None:
        """See `WorkItems.wait_for_queued` (bounded by a short re-check interval)."""
        with anyio.move_on_after(min(timeout, POLL_RECHECK_SECONDS)):
            await self._queued.wait()

    async def ack_work(self, environment_id: str, work_id: str) -> WorkRow:
        """See `WorkItems.ack_work`."""
        return await self._transition(environment_id, work_id, wb.ack)

    async def heartbeat_work(
        self, environment_id: str, work_id: str, *, expected: str | None, ttl_seconds: int | None
    ) -> HeartbeatResult:
        """See `WorkItems.heartbeat_work`."""
        extended = False

        def change(row: WorkRow, now: float) -> dict[str, Any]:
            nonlocal extended
            updates, extended = wb.heartbeat(row, expected, ttl_seconds, now)
            return updates

        row = await self._transition(environment_id, work_id, change)
        return HeartbeatResult(row=row, lease_extended=extended)

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
        """Lock the row, compute the change with the database's clock, write it back."""
        async with self._pool().connection() as conn, conn.transaction():
            found = await q.fetchone(
                conn,
                f"SELECT {wb.WORK_COLUMNS}, {NOW} FROM work_items WHERE id = %s FOR UPDATE",
                (work_id,),
            )
            if found is None or found[1] != environment_id:
                raise NotFound(f"work {work_id} not found in environment {environment_id}")
            row = _row(found[:-1])
            updates = change(row, float(found[-1]))
            if not updates:
                return row
            columns = ", ".join(f"{name} = %s" for name in updates)
            updated = await q.fetchone(
                conn,
                f"UPDATE work_items SET {columns} WHERE id = %s RETURNING {wb.WORK_COLUMNS}",
                (*updates.values(), work_id),
            )
        assert updated is not None
        return _row(updated)

    async def get_work(self, work_id: str) -> WorkRow | None:
        """See `WorkItems.get_work`."""
        async with self._pool().connection() as conn:
            found = await q.fetchone(
                conn, f"SELECT {wb.WORK_COLUMNS} FROM work_items WHERE id = %s", (work_id,)
            )
        return None if found is None else _row(found)

    async def list_work(
        self, environment_id: str, *, after_id: str | None, limit: int
    ) -> list[WorkRow]:
        """See `WorkItems.list_work`."""
        sql = f"SELECT {wb.WORK_COLUMNS} FROM work_items WHERE environment_id = %s"
        args: list[Any] = [environment_id]
        if after_id is not None:
            sql += " AND id < %s"
            args.append(after_id)
        sql += " ORDER BY id DESC LIMIT %s"
        args.append(limit + 1)
        async with self._pool().connection() as conn:
            return [_row(r) for r in await q.fetchall(conn, sql, args)]

    async def work_stats(self, environment_id: str) -> WorkStats:
        """See `WorkItems.work_stats`."""
        async with self._pool().connection() as conn:
            found = await q.fetchone(
                conn,
                "SELECT count(*) FILTER (WHERE polled_at IS NULL), "
                "count(*) FILTER (WHERE polled_at IS NOT NULL), min(created_at) "
                "FROM work_items WHERE environment_id = %s AND state = 'queued'",
                (environment_id,),
            )
            polling = await q.fetchone(
                conn,
                f"SELECT count(*) FROM work_pollers WHERE environment_id = %s "
                f"AND polled_at > {NOW} - %s",
                (environment_id, wb.POLLERS_WINDOW_SECONDS),
            )
        assert found is not None and polling is not None
        return WorkStats(
            depth=int(found[0]),
            pending=int(found[1]),
            oldest_queued_at=None if found[2] is None else float(found[2]),
            workers_polling=int(polling[0]),
        )

    async def work_token(self, work_id: str) -> tuple[WorkRow, str | None] | None:
        """See `WorkItems.work_token`."""
        async with self._pool().connection() as conn:
            found = await q.fetchone(
                conn,
                f"SELECT {wb.WORK_COLUMNS}, token_hash FROM work_items WHERE id = %s",
                (work_id,),
            )
        return None if found is None else (_row(found[:-1]), found[-1])

    async def live_work_for_session(self, session_id: str) -> WorkRow | None:
        """See `WorkItems.live_work_for_session`."""
        async with self._pool().connection() as conn:
            found = await q.fetchone(
                conn,
                f"SELECT {wb.WORK_COLUMNS} FROM work_items "
                "WHERE session_id = %s AND state <> 'stopped'",
                (session_id,),
            )
        return None if found is None else _row(found)

    async def expire_work(self) -> list[WorkRow]:
        """See `WorkItems.expire_work`."""
        async with self._pool().connection() as conn, conn.transaction():
            await conn.execute(
                f"UPDATE work_items SET state = 'stopped', stopped_at = {NOW}, lease_lost = 1 "
                f"WHERE state IN ('starting', 'active', 'stopping') AND lease_expires < {NOW}"
            )
            rows = await q.fetchall(
                conn,
                f"SELECT {wb.WORK_COLUMNS} FROM work_items "
                "WHERE lease_lost = 1 AND lost_reported = 0 ORDER BY id",
            )
        return [_row(r) for r in rows]

    async def mark_lost_reported(self, work_id: str) -> None:
        """See `WorkItems.mark_lost_reported`."""
        async with self._pool().connection() as conn:
            await conn.execute("UPDATE work_items SET lost_reported = 1 WHERE id = %s", (work_id,))

    async def add_environment_key(self, key: EnvironmentKey) -> None:
        """See `WorkItems.add_environment_key`."""
        async with self._pool().connection() as conn:
            await conn.execute(
                "INSERT INTO environment_keys (id, environment_id, key_hash, created_at) "
                "VALUES (%s, %s, %s, %s)",
                (key.id, key.environment_id, key.key_hash, key.created_at),
            )

    async def get_environment_key(self, key_id: str) -> EnvironmentKey | None:
        """See `WorkItems.get_environment_key`."""
        async with self._pool().connection() as conn:
            found = await q.fetchone(
                conn,
                "SELECT id, environment_id, key_hash, created_at, revoked_at "
                "FROM environment_keys WHERE id = %s",
                (key_id,),
            )
        return None if found is None else _key(found)

    async def list_environment_keys(self, environment_id: str) -> list[EnvironmentKey]:
        """See `WorkItems.list_environment_keys`."""
        async with self._pool().connection() as conn:
            rows = await q.fetchall(
                conn,
                "SELECT id, environment_id, key_hash, created_at, revoked_at "
                "FROM environment_keys WHERE environment_id = %s ORDER BY id",
                (environment_id,),
            )
        return [_key(r) for r in rows]

    async def revoke_environment_key(self, key_id: str, revoked_at: str) -> bool:
        """See `WorkItems.revoke_environment_key`."""
        async with self._pool().connection() as conn:
            cur = await conn.execute(
                "UPDATE environment_keys SET revoked_at = %s WHERE id = %s AND revoked_at IS NULL",
                (revoked_at, key_id),
            )
            return cur.rowcount > 0


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
