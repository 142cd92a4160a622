"""`memory_store` session resources: which store, mounted where, with what access.

The entry snapshots the store's name and description at attach time (later edits do not
reach the session, as on the hosted API) and fixes the mount path `/mnt/memory/<slug>`.
"""

from __future__ import annotations

from typing import Any

from corral.errors import BadRequest, NotFound
from corral.ids import new_id, now_rfc3339
from corral.service.memory_stores import MemoryStoreService
from corral.wire.memory_stores import slug
from corral.wire.sessions import MemoryStoreResource

MEMORY_ROOT = "/mnt/memory"


class MemoryResources:
    """Validates and builds `memory_store` resource entries."""

    def __init__(self, stores: MemoryStoreService) -> None:
        self.stores = stores

    async def build(self, item: MemoryStoreResource, where: str, taken: set[str]) -> dict[str, Any]:
        """The stored entry; a missing or archived store, or a second store with the same
        mount path, is a 400 naming the field."""
        try:
            row = await self.stores.row(item.memory_store_id)
        except NotFound as exc:
            raise BadRequest(f"{where}.memory_store_id: {exc.message}") from exc
        if row.archived_at is not None:
            raise BadRequest(
                f"{where}.memory_store_id: memory store {row.id} is archived and cannot be "
                "attached to new sessions",
                error_code="memory_store_archived",
            )
        path = f"{MEMORY_ROOT}/{slug(row.body['name'])}"
        if path in taken:
            raise BadRequest(
                f"{where}: another resource of this session already mounts at {path} (attach "
                "each store once; stores whose names give the same slug cannot share a session)"
            )
        taken.add(path)
        now = now_rfc3339()
        return {
            "id": new_id("sesrsc"),
            "type": "memory_store",
            "memory_store_id": row.id,
            "access": item.access or "read_write",
            "instructions": item.instructions,
            "name": row.body["name"],
            "description": row.body.get("description") or "",
            "mount_path": path,
            "created_at": now,
            "updated_at": now,
        }


def memory_resources(session_body: dict[str, Any]) -> list[dict[str, Any]]:
    """The session's `memory_store` entries."""
    return [r for r in session_body.get("resources") or [] if r.get("type") == "memory_store"]
