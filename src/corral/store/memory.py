"""The memory-store part of the `Store` contract: memories (one row per path) and their
append-only version history. The stores themselves are plain resources (kind
`memory_store`); only their contents need tables of their own, because a write must check a
precondition, keep paths unique and record a version in one transaction.

Paths are compared and ordered as UTF-8 bytes on every backend (PostgreSQL columns use the
"C" collation), which is what prefix listing relies on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

MEMORY_STORE_KIND = "memory_store"
MEMORY_COLUMNS = (
    "id, store_id, path, content, content_sha256, content_size_bytes, version_id, "
    "created_at, updated_at"
)
VERSION_COLUMNS = (
    "id, store_id, memory_id, operation, path, content, content_sha256, content_size_bytes, "
    "created_by, created_at, redacted_at, redacted_by"
)


Operation = Literal["created", "modified", "deleted"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRow:
    """A memory as stored (always with its content)."""

    id: str
    store_id: str
    path: str
    content: str
    content_sha256: str
    content_size_bytes: int
    version_id: str
    created_at: str
    updated_at: str


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionRow:
    """One recorded change; path/content/sha/size are None once redacted (content and
    sha/size also for a deletion)."""

    id: str
    store_id: str
    memory_id: str
    operation: Operation
    path: str | None
    content: str | None
    content_sha256: str | None
    content_size_bytes: int | None
    created_by: dict[str, Any] | None
    created_at: str
    redacted_at: str | None = None
    redacted_by: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryChange:
    """One write to a memory, applied atomically with its version.

    `created`: `path` and `content` required, `memory_id` is the new id.
    `modified`: `path` (rename) and `content` are each None to keep them.
    `deleted`: removes the memory.
    `expected_sha256`, when set, must equal the memory's current `content_sha256`.
    """

    store_id: str
    memory_id: str
    operation: Operation
    version_id: str
    at: str
    actor: dict[str, Any] | None
    path: str | None = None
    content: str | None = None
    content_sha256: str | None = None
    expected_sha256: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionFilter:
    """Filters of `memory_versions.list`; the actor filters match `created_by`."""

    memory_id: str | None = None
    operation: Operation | None = None
    actor_type: str | None = None
    actor_id: str | None = None
    created_gte: str | None = None
    created_lte: str | None = None


class StaleMemory(Exception):
    """The memory's current content is not the expected one (raised by `write_memory`)."""


class PathTaken(Exception):
    """Another memory of the store already has the path (raised by `write_memory`)."""


class NoSuchMemory(Exception):
    """The memory to modify or delete does not exist (raised by `write_memory`)."""


def actor_key(actor: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(type, id) columns of an actor, for the version filters."""
    if not actor:
        return None, None
    kind = str(actor.get("type"))
    field = {
        "session_actor": "session_id",
        "api_actor": "api_key_id",
        "user_actor": "user_id",
        "service_account_actor": "service_account_id",
    }.get(kind)
    return kind, (str(actor.get(field)) if field else None)


def prefix_end(prefix: str) -> str:
    """The smallest path after every path starting with `prefix` (which ends with `/`):
    `/` + 1 is `0` in byte order."""
    return prefix[:-1] + "0"


class MemoryTable(Protocol):
    """Memories and versions of memory stores."""

    async def write_memory(self, change: MemoryChange) -> tuple[MemoryRow | None, VersionRow]:
        """Apply `change` and record its version in one transaction; returns the memory as
        it now is (None after a deletion) and the version.

        Raises:
            NoSuchMemory: modify/delete of a memory the store does not hold.
            StaleMemory: `expected_sha256` does not match.
            PathTaken: create or rename onto a path another memory has.
        """
        ...

    async def get_memory(self, store_id: str, memory_id: str) -> MemoryRow | None:
        """The memory, or None."""
        ...

    async def list_memories(
        self,
        store_id: str,
        prefix: str,
        *,
        after: str | None = None,
        start: str | None = None,
        limit: int,
    ) -> list[MemoryRow]:
        """Up to `limit` memories whose path starts with `prefix`, in path (byte) order,
        with paths `> after` and `>= start` when given."""
        ...

    async def get_memory_version(self, store_id: str, version_id: str) -> VersionRow | None:
        """The version, or None."""
        ...

    async def list_memory_versions(
        self, store_id: str, where: VersionFilter, *, before_id: str | None, limit: int
    ) -> list[VersionRow]:
        """Newest first (by id), ids `< before_id` when given, `limit` at most."""
        ...

    async def redact_memory_version(
        self, store_id: str, version_id: str, actor: dict[str, Any] | None, at: str
    ) -> VersionRow | None:
        """Blank path, content, sha and size and stamp `redacted_at/by` (once: a second
        redaction keeps the first stamp); None if there is no such version."""
        ...

    async def purge_memory_store(self, store_id: str) -> None:
        """Remove every memory and version of the store."""
        ...


# ---- row helpers shared by the backends ----------------------------------------------


def next_state(current: MemoryRow | None, change: MemoryChange) -> MemoryRow | None:
    """The memory after `change` (None once deleted; `current` itself when nothing changes)."""
    if change.operation == "deleted":
        return None
    if current is None:
        assert change.path is not None and change.content is not None
        return MemoryRow(
            id=change.memory_id,
            store_id=change.store_id,
            path=change.path,
            content=change.content,
            content_sha256=change.content_sha256 or "",
            content_size_bytes=len(change.content.encode()),
            version_id=change.version_id,
            created_at=change.at,
            updated_at=change.at,
        )
    path = change.path if change.path is not None else current.path
    if change.content is None or change.content_sha256 == current.content_sha256:
        content, sha = current.content, current.content_sha256
    else:
        content, sha = change.content, change.content_sha256 or ""
    if path == current.path and sha == current.content_sha256:
        return current
    return MemoryRow(
        id=current.id,
        store_id=current.store_id,
        path=path,
        content=content,
        content_sha256=sha,
        content_size_bytes=len(content.encode()),
        version_id=change.version_id,
        created_at=current.created_at,
        updated_at=change.at,
    )


def version_of(
    change: MemoryChange, current: MemoryRow | None, new: MemoryRow | None
) -> VersionRow:
    """The version recording `current -> new`."""
    if new is None:
        assert current is not None
        return VersionRow(
            id=change.version_id,
            store_id=change.store_id,
            memory_id=change.memory_id,
            operation="deleted",
            path=current.path,
            content=None,
            content_sha256=None,
            content_size_bytes=None,
            created_by=change.actor,
            created_at=change.at,
        )
    return VersionRow(
        id=change.version_id,
        store_id=change.store_id,
        memory_id=change.memory_id,
        operation="created" if current is None else "modified",
        path=new.path,
        content=new.content,
        content_sha256=new.content_sha256,
        content_size_bytes=new.content_size_bytes,
        created_by=change.actor,
        created_at=change.at,
    )


def memory_params(row: MemoryRow) -> tuple[Any, ...]:
    """Values in `MEMORY_COLUMNS` order."""
    return (
        row.id,
        row.store_id,
        row.path,
        row.content,
        row.content_sha256,
        row.content_size_bytes,
        row.version_id,
        row.created_at,
        row.updated_at,
    )


def version_params(row: VersionRow, wrap: Any) -> tuple[Any, ...]:
    """Values in `VERSION_COLUMNS` order; `wrap` encodes the actor objects."""
    return (
        row.id,
        row.store_id,
        row.memory_id,
        row.operation,
        row.path,
        row.content,
        row.content_sha256,
        row.content_size_bytes,
        wrap(row.created_by),
        row.created_at,
        row.redacted_at,
        wrap(row.redacted_by),
    )


def to_memory(r: Sequence[Any]) -> MemoryRow:
    """A `MEMORY_COLUMNS` row."""
    return MemoryRow(
        id=r[0],
        store_id=r[1],
        path=r[2],
        content=r[3],
        content_sha256=r[4],
        content_size_bytes=int(r[5]),
        version_id=r[6],
        created_at=r[7],
        updated_at=r[8],
    )


def to_version(r: Sequence[Any]) -> VersionRow:
    """A `VERSION_COLUMNS` row (actors as JSON text or already decoded)."""
    return VersionRow(
        id=r[0],
        store_id=r[1],
        memory_id=r[2],
        operation=r[3],
        path=r[4],
        content=r[5],
        content_sha256=r[6],
        content_size_bytes=None if r[7] is None else int(r[7]),
        created_by=_unjson(r[8]),
        created_at=r[9],
        redacted_at=r[10],
        redacted_by=_unjson(r[11]),
    )


def _unjson(value: Any) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    decoded: dict[str, Any] = json.loads(value)
    return decoded
