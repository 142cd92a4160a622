"""PostgreSQL implementation of `MemoryTable` (mixed into `PostgresStore`).

A write locks the memory's row (`FOR UPDATE`), so concurrent writers of one memory take turns
and each checks its precondition against the other's result; the unique (store, path) index
settles creates and renames racing for one path.
"""

from __future__ import annotations

from typing import Any, Protocol

from psycopg import errors
from psycopg.types.json import Json

from corral.store.memory import (
    MEMORY_COLUMNS,
    VERSION_COLUMNS,
    MemoryChange,
    MemoryRow,
    NoSuchMemory,
    PathTaken,
    StaleMemory,
    VersionFilter,
    VersionRow,
    actor_key,
    memory_params,
    next_state,
    prefix_end,
    to_memory,
    to_version,
    version_of,
    version_params,
)
from corral.store.postgres_bound import BoundedPool
from corral.store.postgres_sql import Conn, fetchall, fetchone

_MEMORY_VALUES = ", ".join(["%s"] * 9)
_VERSION_VALUES = ", ".join(["%s"] * 14)


class _Pooled(Protocol):
    """What the mixin needs of `PostgresStore`."""

    @property
    def pool(self) -> BoundedPool: ...


class PostgresMemories:
    """Memories and versions in the store's database."""

    async def write_memory(
        self: _Pooled, change: MemoryChange
    ) -> tuple[MemoryRow | None, VersionRow]:
        """Apply one change with its version, atomically (see `MemoryTable`)."""
        try:
            async with self.pool.connection() as conn, conn.transaction():
                return await _write(conn, change)
        except errors.UniqueViolation as exc:
            raise PathTaken(change.path or "") from exc

    async def get_memory(self: _Pooled, store_id: str, memory_id: str) -> MemoryRow | None:
        """The memory, or None."""
        async with self.pool.connection() as conn:
            return await _memory(conn, store_id, memory_id)

    async def list_memories(
        self: _Pooled,
        store_id: str,
        prefix: str,
        *,
        after: str | None = None,
        start: str | None = None,
        limit: int,
    ) -> list[MemoryRow]:
        """Memories under `prefix` in byte order of path."""
        sql = (
            f"SELECT {MEMORY_COLUMNS} FROM memories "
            "WHERE store_id = %s AND path >= %s AND path < %s"
        )
        args: list[Any] = [store_id, prefix, prefix_end(prefix)]
        if after is not None:
            sql += " AND path > %s"
            args.append(after)
        if start is not None:
            sql += " AND path >= %s"
            args.append(start)
        sql += " ORDER BY path LIMIT %s"
        args.append(limit)
        async with self.pool.connection() as conn:
            return [to_memory(r) for r in await fetchall(conn, sql, args)]

    async def get_memory_version(
        self: _Pooled, store_id: str, version_id: str
    ) -> VersionRow | None:
        """The version, or None."""
        async with self.pool.connection() as conn:
            return await _version(conn, store_id, version_id)

    async def list_memory_versions(
        self: _Pooled, store_id: str, where: VersionFilter, *, before_id: str | None, limit: int
    ) -> list[VersionRow]:
        """Newest first."""
        sql = f"SELECT {VERSION_COLUMNS} FROM memory_versions WHERE store_id = %s"
        args: list[Any] = [store_id]
        for clause, value in (
            ("id < %s", before_id),
            ("memory_id = %s", where.memory_id),
            ("operation = %s", where.operation),
            ("actor_type = %s", where.actor_type),
            ("actor_id = %s", where.actor_id),
            ("created_at >= %s", where.created_gte),
            ("created_at <= %s", where.created_lte),
        ):
            if value is not None:
                sql += f" AND {clause}"
                args.append(value)
        sql += " ORDER BY id DESC LIMIT %s"
        args.append(limit)
        async with self.pool.connection() as conn:
            return [to_version(r) for r in await fetchall(conn, sql, args)]

    async def redact_memory_version(
        self: _Pooled, store_id: str, version_id: str, actor: dict[str, Any] | None, at: str
    ) -> VersionRow | None:
        """Blank the version's content (first redaction's stamp kept)."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "UPDATE memory_versions SET path = NULL, content = NULL, content_sha256 = NULL, "
                "content_size_bytes = NULL, redacted_at = coalesce(redacted_at, %s), "
                "redacted_by = CASE WHEN redacted_at IS NULL THEN %s::jsonb ELSE redacted_by END "
                "WHERE id = %s AND store_id = %s",
                (at, _json(actor), version_id, store_id),
            )
            return await _version(conn, store_id, version_id)

    async def purge_memory_store(self: _Pooled, store_id: str) -> None:
        """Remove the store's memories and versions."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute("DELETE FROM memories WHERE store_id = %s", (store_id,))
            await conn.execute("DELETE FROM memory_versions WHERE store_id = %s", (store_id,))


async def _write(conn: Conn, change: MemoryChange) -> tuple[MemoryRow | None, VersionRow]:
    current = None
    if change.operation != "created":
        current = await _memory(conn, change.store_id, change.memory_id, lock=True)
        if current is None:
            raise NoSuchMemory(change.memory_id)
        expected = change.expected_sha256
        if expected is not None and expected != current.content_sha256:
            raise StaleMemory(current.content_sha256)
    new = next_state(current, change)
    if new is not None and current is not None and new == current:
        version = await _version(conn, change.store_id, current.version_id)
        assert version is not None
        return current, version
    if new is None:
        await conn.execute("DELETE FROM memories WHERE id = %s", (change.memory_id,))
    elif current is None:
        await conn.execute(
            f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES ({_MEMORY_VALUES})",
            memory_params(new),
        )
    else:
        await conn.execute(
            "UPDATE memories SET path = %s, content = %s, content_sha256 = %s, "
            "content_size_bytes = %s, version_id = %s, updated_at = %s WHERE id = %s",
            (
                new.path,
                new.content,
                new.content_sha256,
                new.content_size_bytes,
                new.version_id,
                new.updated_at,
                new.id,
            ),
        )
    version = version_of(change, current, new)
    await conn.execute(
        f"INSERT INTO memory_versions ({VERSION_COLUMNS}, actor_type, actor_id) "
        f"VALUES ({_VERSION_VALUES})",
        (*version_params(version, _json), *actor_key(version.created_by)),
    )
    return new, version


async def _memory(
    conn: Conn, store_id: str, memory_id: str, *, lock: bool = False
) -> MemoryRow | None:
    row = await fetchone(
        conn,
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = %s AND store_id = %s"
        + (" FOR UPDATE" if lock else ""),
        (memory_id, store_id),
    )
    return to_memory(row) if row else None


async def _version(conn: Conn, store_id: str, version_id: str) -> VersionRow | None:
    row = await fetchone(
        conn,
        f"SELECT {VERSION_COLUMNS} FROM memory_versions WHERE id = %s AND store_id = %s",
        (version_id, store_id),
    )
    return to_version(row) if row else None


def _json(value: dict[str, Any] | None) -> Json | None:
    return None if value is None else Json(value)
