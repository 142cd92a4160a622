"""Memory stores over the API (`client.beta.memory_stores`): stores, memories and versions.

Stores are `resources` rows (kind `memory_store`); memories and versions live in the store's
`MemoryTable`, which applies each write, its precondition and its version atomically. Every
write names its actor (`api_actor` for API calls, `session_actor` for what an agent wrote
under /mnt/memory), and that is what versions report as `created_by`.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any, Literal

from corral.errors import BadRequest, MemoryPathConflict, MemoryPreconditionFailed, NotFound
from corral.ids import new_id, now_rfc3339
from corral.service.common import apply_metadata_patch, page_envelope
from corral.store.base import Page, Resource, Store
from corral.store.memory import (
    MEMORY_STORE_KIND,
    MemoryChange,
    MemoryRow,
    NoSuchMemory,
    Operation,
    PathTaken,
    StaleMemory,
    VersionFilter,
    VersionRow,
    prefix_end,
)
from corral.wire.memory_stores import (
    MemoryCreate,
    MemoryStoreCreate,
    MemoryStoreUpdate,
    MemoryUpdate,
    path_problem,
)

View = Literal["basic", "full"]
FULL_PAGE_MAX = 20
"""With `view=full`, list pages hold at most this many items (reference)."""


def sha256_hex(text: str) -> str:
    """Lowercase hex SHA-256 of the UTF-8 bytes, no normalisation."""
    return hashlib.sha256(text.encode()).hexdigest()


def render_memory(row: MemoryRow, view: View) -> dict[str, Any]:
    """The wire `memory`."""
    return {
        "type": "memory",
        "id": row.id,
        "memory_store_id": row.store_id,
        "path": row.path,
        "content": row.content if view == "full" else None,
        "content_sha256": row.content_sha256,
        "content_size_bytes": row.content_size_bytes,
        "memory_version_id": row.version_id,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def render_version(row: VersionRow, view: View) -> dict[str, Any]:
    """The wire `memory_version`."""
    return {
        "type": "memory_version",
        "id": row.id,
        "memory_id": row.memory_id,
        "memory_store_id": row.store_id,
        "operation": row.operation,
        "path": row.path,
        "content": row.content if view == "full" else None,
        "content_sha256": row.content_sha256,
        "content_size_bytes": row.content_size_bytes,
        "created_by": row.created_by,
        "created_at": row.created_at,
        "redacted_at": row.redacted_at,
        "redacted_by": row.redacted_by,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryListing:
    """Parameters of `memories.list`."""

    path_prefix: str = "/"
    depth: int = 0
    limit: int = 20
    page: str | None = None
    view: View = "basic"


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionListing:
    """Parameters of `memory_versions.list`."""

    where: VersionFilter
    limit: int = 20
    page: str | None = None
    view: View = "basic"


class MemoryStoreService:
    """CRUD for memory stores, their memories and versions."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # ---- stores ------------------------------------------------------------------------

    async def create(self, req: MemoryStoreCreate) -> dict[str, Any]:
        """A new, empty store."""
        now = now_rfc3339()
        body: dict[str, Any] = {
            "id": new_id("memstore"),
            "type": "memory_store",
            "name": req.name,
            "description": req.description or "",
            "metadata": dict(req.metadata or {}),
            "created_at": now,
            "updated_at": now,
            "archived_at": None,
        }
        await self.store.insert_resource(
            Resource(kind=MEMORY_STORE_KIND, id=body["id"], body=body, created_at=now)
        )
        return body

    async def get(self, store_id: str) -> dict[str, Any]:
        """The store."""
        return (await self.row(store_id)).body

    async def update(self, store_id: str, req: MemoryStoreUpdate) -> dict[str, Any]:
        """Rename, describe, patch metadata (not once archived)."""
        row = await self.writable(store_id)
        body = dict(row.body)
        if req.name is not None:
            body["name"] = req.name
        if req.description is not None:
            body["description"] = req.description
        if req.metadata is not None:
            body["metadata"] = apply_metadata_patch(body["metadata"], req.metadata)
        body["updated_at"] = now_rfc3339()
        await self._save(row, body)
        return body

    async def archive(self, store_id: str) -> dict[str, Any]:
        """Irreversibly freeze the store (reads, deletes and redactions still work)."""
        row = await self.row(store_id)
        body = dict(row.body)
        if body["archived_at"] is None:
            body["archived_at"] = body["updated_at"] = now_rfc3339()
            await self._save(row, body)
        return body

    async def delete(self, store_id: str) -> dict[str, Any]:
        """Remove the store with every memory and version."""
        await self.row(store_id)
        if not await self.store.delete_resource(MEMORY_STORE_KIND, store_id):
            raise _store_not_found(store_id)
        await self.store.purge_memory_store(store_id)
        return {"id": store_id, "type": "memory_store_deleted"}

    async def list(self, page: Page) -> dict[str, Any]:
        """A page of stores (archived ones only when asked)."""
        rows = await self.store.list_resources(MEMORY_STORE_KIND, page)
        return page_envelope(rows, page.limit, lambda r: r.body, lambda r: r.id)

    # ---- memories ----------------------------------------------------------------------

    async def create_memory(
        self, store_id: str, req: MemoryCreate, actor: dict[str, Any], view: View = "basic"
    ) -> dict[str, Any]:
        """A new memory at a free path."""
        await self.writable(store_id)
        row, _ = await self.write(
            store_id, new_id("mem"), "created", actor, path=req.path, content=req.content
        )
        assert row is not None
        return render_memory(row, view)

    async def get_memory(self, store_id: str, memory_id: str, view: View) -> dict[str, Any]:
        """The memory."""
        await self.row(store_id)
        row = await self.store.get_memory(store_id, memory_id)
        if row is None:
            raise _memory_not_found(memory_id)
        return render_memory(row, view)

    async def update_memory(
        self,
        store_id: str,
        memory_id: str,
        req: MemoryUpdate,
        actor: dict[str, Any],
        view: View = "basic",
    ) -> dict[str, Any]:
        """New content and/or path, optionally only if the content is still as expected."""
        await self.writable(store_id)
        expected = req.precondition.content_sha256 if req.precondition else None
        row, _ = await self.write(
            store_id,
            memory_id,
            "modified",
            actor,
            path=req.path,
            content=req.content,
            expected=expected,
        )
        assert row is not None
        return render_memory(row, view)

    async def delete_memory(
        self, store_id: str, memory_id: str, actor: dict[str, Any], expected: str | None
    ) -> dict[str, Any]:
        """Remove the memory (its versions stay)."""
        await self.row(store_id)
        await self.write(store_id, memory_id, "deleted", actor, expected=expected)
        return {"id": memory_id, "type": "memory_deleted"}

    async def list_memories(self, store_id: str, query: MemoryListing) -> dict[str, Any]:
        """A page of memories and, with `depth`, `memory_prefix` roll-ups, in path order."""
        await self.row(store_id)
        prefix = query.path_prefix
        if prefix != "/" and (not prefix.endswith("/") or path_problem(prefix[:-1])):
            raise BadRequest("path_prefix: must be a valid path ending with '/'")
        limit = min(query.limit, FULL_PAGE_MAX) if query.view == "full" else query.limit
        after, start = _decode_page(query.page)
        items: builtins.list[tuple[dict[str, Any], tuple[str | None, str | None]]] = []
        while len(items) <= limit:
            batch = await self.store.list_memories(
                store_id, prefix, after=after, start=start, limit=limit + 1
            )
            for row in batch:
                if start is not None and row.path < start:
                    continue  # inside a prefix already rolled up in this batch
                item, after, start = _list_item(row, prefix, query.depth, query.view)
                items.append((item, (after, start)))
                if len(items) > limit:
                    break
            if len(batch) <= limit:
                break
        shown = items[:limit]
        more = len(items) > limit
        return {
            "data": [item for item, _ in shown],
            "next_page": _encode_page(*shown[-1][1]) if more and shown else None,
        }

    # ---- versions ----------------------------------------------------------------------

    async def list_versions(self, store_id: str, query: VersionListing) -> dict[str, Any]:
        """A page of versions, newest first."""
        await self.row(store_id)
        limit = min(query.limit, FULL_PAGE_MAX) if query.view == "full" else query.limit
        rows = await self.store.list_memory_versions(
            store_id, query.where, before_id=query.page, limit=limit + 1
        )
        return page_envelope(rows, limit, lambda r: render_version(r, query.view), lambda r: r.id)

    async def get_version(self, store_id: str, version_id: str, view: View) -> dict[str, Any]:
        """The version."""
        await self.row(store_id)
        row = await self.store.get_memory_version(store_id, version_id)
        if row is None:
            raise _version_not_found(version_id)
        return render_version(row, view)

    async def redact_version(
        self, store_id: str, version_id: str, actor: dict[str, Any]
    ) -> dict[str, Any]:
        """Blank a version's content and path for good."""
        await self.row(store_id)
        row = await self.store.redact_memory_version(store_id, version_id, actor, now_rfc3339())
        if row is None:
            raise _version_not_found(version_id)
        return render_version(row, "full")

    # ---- shared with the /mnt/memory sync ------------------------------------------------

    async def write(
        self,
        store_id: str,
        memory_id: str,
        operation: Operation,
        actor: dict[str, Any],
        *,
        path: str | None = None,
        content: str | None = None,
        expected: str | None = None,
    ) -> tuple[MemoryRow | None, VersionRow]:
        """One write through the store, its refusals as API errors."""
        change = MemoryChange(
            store_id=store_id,
            memory_id=memory_id,
            operation=operation,
            version_id=new_id("memver"),
            at=now_rfc3339(),
            actor=actor,
            path=path,
            content=content,
            content_sha256=None if content is None else sha256_hex(content),
            expected_sha256=expected,
        )
        try:
            return await self.store.write_memory(change)
        except NoSuchMemory:
            raise _memory_not_found(memory_id) from None
        except StaleMemory:
            raise MemoryPreconditionFailed(
                f"memory {memory_id} does not have the expected content_sha256 {expected}; "
                "read it again and retry with its current content_sha256"
            ) from None
        except PathTaken:
            raise MemoryPathConflict(
                f"another memory in {store_id} already has the path {path!r}"
            ) from None

    async def all_memories(self, store_id: str) -> builtins.list[MemoryRow]:
        """Every memory of the store, in path order (for mounting it)."""
        rows: builtins.list[MemoryRow] = []
        while True:
            after = rows[-1].path if rows else None
            batch = await self.store.list_memories(store_id, "/", after=after, limit=500)
            rows.extend(batch)
            if len(batch) < 500:
                return rows

    async def row(self, store_id: str) -> Resource:
        """The store's row."""
        row = await self.store.get_resource(MEMORY_STORE_KIND, store_id)
        if row is None:
            raise _store_not_found(store_id)
        return row

    async def writable(self, store_id: str) -> Resource:
        """The store's row, refusing an archived store."""
        row = await self.row(store_id)
        if row.archived_at is not None:
            raise BadRequest(
                f"memory store {store_id} is archived; its memories can be read and deleted "
                "but not created or changed",
                error_code="memory_store_archived",
            )
        return row

    async def _save(self, row: Resource, body: dict[str, Any]) -> None:
        await self.store.replace_resource(
            replace(row, body=body, archived_at=body.get("archived_at"))
        )


def _list_item(
    row: MemoryRow, prefix: str, depth: int, view: View
) -> tuple[dict[str, Any], str | None, str | None]:
    """The list item for `row` and the position after it: (item, after, start)."""
    segments = row.path[len(prefix) :].split("/")
    if depth == 0 or len(segments) <= depth:
        return render_memory(row, view), row.path, None
    rolled = prefix + "/".join(segments[:depth]) + "/"
    return {"type": "memory_prefix", "path": rolled}, None, prefix_end(rolled)


def _encode_page(after: str | None, start: str | None) -> str:
    raw = json.dumps({"a": after, "s": start}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_page(token: str | None) -> tuple[str | None, str | None]:
    if not token:
        return None, None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = json.loads(raw)
        after, start = data["a"], data["s"]
        if not all(v is None or isinstance(v, str) for v in (after, start)):
            raise ValueError("bad cursor")
        # what no stored path can hold: NUL (PostgreSQL text) and lone surrogates (UTF-8)
        (after or "").encode() + (start or "").encode()
        if "\x00" in (after or "") + (start or ""):
            raise ValueError("bad cursor")
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeEncodeError) as exc:
        raise BadRequest("page: invalid cursor (use the next_page of a previous page)") from exc
    return after, start


def _store_not_found(store_id: str) -> NotFound:
    return NotFound(f"memory store {store_id} not found", error_code="memory_store_not_found")


def _memory_not_found(memory_id: str) -> NotFound:
    return NotFound(f"memory {memory_id} not found", error_code="memory_not_found")


def _version_not_found(version_id: str) -> NotFound:
    return NotFound(f"memory version {version_id} not found", error_code="memory_version_not_found")
