"""SQLite implementation of `MemoryTable` (mixed into `SqliteStore`)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

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
from corral.store.sqlite_db import SqliteDatabase


class SqliteMemories:
    """Memories and versions in the store's SQLite file."""

    db: SqliteDatabase

    async def write_memory(self, change: MemoryChange) -> tuple[MemoryRow | None, VersionRow]:
        """Apply one change with its version, atomically (see `MemoryTable`)."""
        return await self.db.write(lambda conn: _write(conn, change))

    async def get_memory(self, store_id: str, memory_id: str) -> MemoryRow | None:
        """The memory, or None."""

        def run(conn: sqlite3.Connection) -> MemoryRow | None:
            return _memory(conn, store_id, memory_id)

        return await self.db.read(run)

    async def list_memories(
        self,
        store_id: str,
        prefix: str,
        *,
        after: str | None = None,
        start: str | None = None,
        limit: int,
    ) -> list[MemoryRow]:
        """Memories under `prefix` in byte order of path."""
        sql = f"SELECT {MEMORY_COLUMNS} FROM memories WHERE store_id = ? AND path >= ? AND path < ?"
        args: list[Any] = [store_id, prefix, prefix_end(prefix)]
        if after is not None:
            sql += " AND path > ?"
            args.append(after)
        if start is not None:
            sql += " AND path >= ?"
            args.append(start)
        sql += " ORDER BY path LIMIT ?"
        args.append(limit)

        def run(conn: sqlite3.Connection) -> list[MemoryRow]:
            return [to_memory(r) for r in conn.execute(sql, args).fetchall()]

        return await self.db.read(run)

    async def get_memory_version(self, store_id: str, version_id: str) -> VersionRow | None:
        """The version, or None."""

        def run(conn: sqlite3.Connection) -> VersionRow | None:
            return _version(conn, store_id, version_id)

        return await self.db.read(run)

    async def list_memory_versions(
        self, store_id: str, where: VersionFilter, *, before_id: str | None, limit: int
    ) -> list[VersionRow]:
        """Newest first."""
        sql = f"SELECT {VERSION_COLUMNS} FROM memory_versions WHERE store_id = ?"
        args: list[Any] = [store_id]
        for clause, value in (
            ("id < ?", before_id),
            ("memory_id = ?", where.memory_id),
            ("operation = ?", where.operation),
            ("actor_type = ?", where.actor_type),
            ("actor_id = ?", where.actor_id),
            ("created_at >= ?", where.created_gte),
            ("created_at <= ?", where.created_lte),
        ):
            if value is not None:
                sql += f" AND {clause}"
                args.append(value)
        sql += " ORDER BY id DESC LIMIT ?"
        args.append(limit)

        def run(conn: sqlite3.Connection) -> list[VersionRow]:
            return [to_version(r) for r in conn.execute(sql, args).fetchall()]

        return await self.db.read(run)

    async def redact_memory_version(
        self, store_id: str, version_id: str, actor: dict[str, Any] | None, at: str
    ) -> VersionRow | None:
        """Blank the version's content (first redaction's stamp kept)."""

        def run(conn: sqlite3.Connection) -> VersionRow | None:
            conn.execute(
                "UPDATE memory_versions SET path = NULL, content = NULL, content_sha256 = NULL, "
                "content_size_bytes = NULL, redacted_at = coalesce(redacted_at, ?), "
                "redacted_by = CASE WHEN redacted_at IS NULL THEN ? ELSE redacted_by END "
                "WHERE id = ? AND store_id = ?",
                (at, _json(actor), version_id, store_id),
            )
            return _version(conn, store_id, version_id)

        return await self.db.write(run)

    async def purge_memory_store(self, store_id: str) -> None:
        """Remove the store's memories and versions."""

        def run(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM memories WHERE store_id = ?", (store_id,))
            conn.execute("DELETE FROM memory_versions WHERE store_id = ?", (store_id,))

        await self.db.write(run)


def _write(conn: sqlite3.Connection, change: MemoryChange) -> tuple[MemoryRow | None, VersionRow]:
    current = _memory(conn, change.store_id, change.memory_id)
    if change.operation == "created":
        current = None
    elif current is None:
        raise NoSuchMemory(change.memory_id)
    elif change.expected_sha256 is not None and change.expected_sha256 != current.content_sha256:
        raise StaleMemory(current.content_sha256)
    new = next_state(current, change)
    if new is not None and current is not None and new == current:
        version = _version(conn, change.store_id, current.version_id)
        assert version is not None  # a live memory's version is never deleted with the store up
        return current, version
    if new is not None and (current is None or new.path != current.path):
        taken = conn.execute(
            "SELECT 1 FROM memories WHERE store_id = ? AND path = ?", (new.store_id, new.path)
        ).fetchone()
        if taken:
            raise PathTaken(new.path)
    if new is None:
        conn.execute("DELETE FROM memories WHERE id = ?", (change.memory_id,))
    else:
        conn.execute(
            f"INSERT OR REPLACE INTO memories ({MEMORY_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            memory_params(new),
        )
    version = version_of(change, current, new)
    conn.execute(
        f"INSERT INTO memory_versions ({VERSION_COLUMNS}, actor_type, actor_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*version_params(version, _json), *actor_key(version.created_by)),
    )
    return new, version


def _memory(conn: sqlite3.Connection, store_id: str, memory_id: str) -> MemoryRow | None:
    row = conn.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ? AND store_id = ?",
        (memory_id, store_id),
    ).fetchone()
    return to_memory(row) if row else None


def _version(conn: sqlite3.Connection, store_id: str, version_id: str) -> VersionRow | None:
    row = conn.execute(
        f"SELECT {VERSION_COLUMNS} FROM memory_versions WHERE id = ? AND store_id = ?",
        (version_id, store_id),
    ).fetchone()
    return to_version(row) if row else None


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value)
