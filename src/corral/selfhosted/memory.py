"""A session's memory stores on the worker's machine, read and written through the API.

The reference's self-hosted sync contract, with the item's sessions token (memory endpoints
refuse environment keys): each attached store is downloaded (`memories.list(view="full")`)
into a directory of its own, mounted at the resource's `mount_path` (read-only stores
read-only). After every tool call (and when the item ends) what the agent changed there is
written back with `content_sha256` preconditions on the state last synced: created files
are created, changed ones updated, deleted ones deleted; when the store changed too, the
store wins (a 409), the file is set back and the tool result says so. Files that cannot be
memories are left alone and named once. The directory is then made to match the store.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import anyio.to_thread

from corral.files import memory_tree
from corral.hands.base import Mount

log = logging.getLogger("corral.selfhosted")
Baseline = memory_tree.Baseline
"""Memory path -> (memory id, content sha256) as last synced."""


@dataclass(frozen=True, slots=True)
class _Place:
    store_id: str
    mount_path: str
    read_only: bool
    root: Path
    state: Path


class MemorySync:
    """The memory stores of one session, under `base` on the worker's disk."""

    def __init__(self, client: anthropic.AsyncAnthropic, session_id: str, base: Path) -> None:
        self.client = client
        self.session_id = session_id
        self.base = base
        self._places: list[_Place] = []
        self._told: set[str] = set()

    async def mounts(self, session: Any) -> list[Mount]:
        """Download every attached store afresh; the mounts for the sandbox."""
        self._places = []
        mounts = []
        for resource in session.resources or []:
            if resource.type != "memory_store":
                continue
            mount_path = str(resource.mount_path)
            name = mount_path.rstrip("/").rsplit("/", 1)[-1]
            place = _Place(
                store_id=resource.memory_store_id,
                mount_path=mount_path,
                read_only=getattr(resource, "access", None) == "read_only",
                root=self.base / name,
                state=self.base / f".{name}.json",
            )
            memories = await self._all(place.store_id)
            mode = 0o755 if place.read_only else 0o700
            await anyio.to_thread.run_sync(memory_tree.fresh_dir, place.root, mode)
            baseline = await anyio.to_thread.run_sync(memory_tree.materialise, place.root, memories)
            await anyio.to_thread.run_sync(memory_tree.save_baseline, place.state, baseline)
            self._places.append(place)
            mounts.append(
                Mount(host_path=place.root, sandbox_path=mount_path, read_only=place.read_only)
            )
        return mounts

    async def _all(self, store_id: str) -> list[Any]:
        memories = self.client.beta.memory_stores.memories
        return [m async for m in memories.list(store_id, view="full") if m.type == "memory"]

    async def sync(self) -> list[str]:
        """Write back what the agent changed, take the store's changes; notes for the tool
        result (conflicts, refused files)."""
        notes: list[str] = []
        for place in self._places:
            if place.read_only:
                continue
            try:
                notes += await self._sync_one(place)
            except (anthropic.APIConnectionError, anthropic.InternalServerError) as exc:
                notes.append(f"{place.mount_path} could not be synced now ({exc}); retried later.")
            except anthropic.NotFoundError:
                continue  # the store was deleted: nothing to save to
        return notes

    async def _sync_one(self, place: _Place) -> list[str]:
        baseline: Baseline = await anyio.to_thread.run_sync(memory_tree.load_baseline, place.state)
        seen = await anyio.to_thread.run_sync(memory_tree.scan, place.root)
        refusals = [
            f"{place.mount_path}{path} was not saved to the memory store: it {why}."
            for path, why in seen.refused.items()
        ]
        notes = [n for n in refusals if n not in self._told]
        self._told.update(notes)
        for path, content in seen.files.items():
            notes += await self._push(place, path, content, baseline)
        if not seen.truncated:
            for path, (memory_id, sha) in baseline.items():
                if path not in seen.files and path not in seen.refused:
                    notes += await self._delete(place, path, memory_id, sha)
        memories = await self._all(place.store_id)
        keep = {p for p in seen.files if p not in baseline}
        fresh = await anyio.to_thread.run_sync(
            memory_tree.reconcile, place.root, memories, seen.files, baseline, keep
        )
        await anyio.to_thread.run_sync(memory_tree.save_baseline, place.state, fresh)
        return notes

    async def _push(self, place: _Place, path: str, content: str, baseline: Baseline) -> list[str]:
        known = baseline.get(path)
        if known is not None and known[1] == _sha(content):
            return []
        memories = self.client.beta.memory_stores.memories
        try:
            if known is None:
                await memories.create(place.store_id, path=path, content=content)
            else:
                await memories.update(
                    known[0],
                    memory_store_id=place.store_id,
                    content=content,
                    precondition={"type": "content_sha256", "content_sha256": known[1]},
                )
        except (anthropic.ConflictError, anthropic.NotFoundError):
            return [_conflict(place.mount_path, path)]
        except anthropic.APIStatusError as exc:
            if exc.status_code >= 500:
                raise
            return [f"{place.mount_path}{path} was not saved to the memory store: {exc.message}"]
        return []

    async def _delete(self, place: _Place, path: str, memory_id: str, sha: str) -> list[str]:
        try:
            await self.client.beta.memory_stores.memories.delete(
                memory_id, memory_store_id=place.store_id, expected_content_sha256=sha
            )
        except anthropic.NotFoundError:
            return []
        except anthropic.ConflictError:
            return [_conflict(place.mount_path, path)]
        return []


def _sha(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def _conflict(mount_path: str, path: str) -> str:
    return (
        f"{mount_path}{path} was changed in the memory store by someone else since this "
        "session last saw it; the store's version wins and is now in the file (your change "
        "was not saved). Read it again before editing."
    )
