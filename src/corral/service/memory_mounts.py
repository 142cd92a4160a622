"""Memory stores mounted at /mnt/memory/<slug> in a session's sandbox, and what the agent
writes there turned into memory versions attributed to the session.

Each attached store gets a host directory `sessions/<id>/memory/<slug>`, filled from the
store whenever a sandbox is provisioned (the store is the truth then). A read-only store's
directory stays the server's and is mounted read-only. A read-write one is handed to the
sandbox's uid; after each tool call (`sync`) it is compared with the state it had after the
previous sync (kept next to it, out of the sandbox's reach, as path -> memory id and sha):

- a file the agent created, changed or deleted is written with `content_sha256`
  preconditions on that earlier state, as the `session_actor`;
- when the store changed too (another session, an API call), the write is refused (409) and
  the server wins: the directory is set back to the store's version and the tool result says
  so; changes made only on the server are copied in;
- files that cannot be memories (bad names, over 100 KB, not UTF-8, links, special files)
  are left alone, never uploaded, and named in the tool result once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from corral.errors import ApiError, Conflict, NotFound
from corral.files import memory_tree
from corral.hands.base import Mount
from corral.ids import new_id
from corral.service.memory_resources import memory_resources
from corral.service.memory_stores import MemoryStoreService, sha256_hex

log = logging.getLogger("corral.service.memory_mounts")
Baseline = memory_tree.Baseline
"""Memory path -> (memory id, content sha256) as the mount held it after the last sync."""


@dataclass(frozen=True, slots=True)
class _Place:
    """Where one attached store lives on the host."""

    store_id: str
    read_only: bool
    root: Path
    state: Path


class MemoryMounts:
    """Materialises attached stores for sandboxes and writes back what the agent changed."""

    def __init__(self, stores: MemoryStoreService, sessions_dir: Path) -> None:
        self.stores = stores
        self.sessions_dir = sessions_dir
        self._told: dict[str, set[str]] = {}
        """Per session, the refusal notes already given (each is said once)."""

    def _places(self, session_id: str, body: dict[str, Any]) -> list[tuple[_Place, str]]:
        base = self.sessions_dir / session_id / "memory"
        out = []
        for entry in memory_resources(body):
            name = entry["mount_path"].rsplit("/", 1)[-1]
            place = _Place(
                store_id=entry["memory_store_id"],
                read_only=entry.get("access") == "read_only",
                root=base / name,
                state=base / f".{name}.json",
            )
            out.append((place, entry["mount_path"]))
        return out

    async def mounts(self, session_id: str, body: dict[str, Any]) -> list[Mount]:
        """Fresh directories holding each attached store, as mounts for a new sandbox (a
        deleted store is not mounted)."""
        mounts = []
        for place, mount_path in self._places(session_id, body):
            try:
                memories = await self.stores.all_memories(place.store_id)
                await self.stores.row(place.store_id)
            except NotFound:
                continue
            mode = 0o755 if place.read_only else 0o700
            await anyio.to_thread.run_sync(memory_tree.fresh_dir, place.root, mode)
            baseline = await anyio.to_thread.run_sync(memory_tree.materialise, place.root, memories)
            await anyio.to_thread.run_sync(memory_tree.save_baseline, place.state, baseline)
            mounts.append(
                Mount(host_path=place.root, sandbox_path=mount_path, read_only=place.read_only)
            )
        return mounts

    async def sync(self, session_id: str) -> list[str]:
        """After a tool call: save the agent's changes, take the server's; notes for the
        tool result (conflicts and refused files)."""
        row = await self.stores.store.get_session(session_id)
        if row is None:
            return []
        notes: list[str] = []
        for place, mount_path in self._places(session_id, row.body):
            if place.read_only or not place.state.exists():
                continue
            try:
                await self.stores.row(place.store_id)
                notes += await self._sync_one(session_id, place, mount_path)
            except NotFound:
                continue  # the store was deleted: nothing to save to
            except OSError:
                log.exception("syncing %s of session %s", mount_path, session_id)
        return notes

    async def _sync_one(self, session_id: str, place: _Place, mount_path: str) -> list[str]:
        baseline: Baseline = await anyio.to_thread.run_sync(memory_tree.load_baseline, place.state)
        seen = await anyio.to_thread.run_sync(memory_tree.scan, place.root)
        refusals = [
            f"{mount_path}{path} was not saved to the memory store: it {why}."
            for path, why in seen.refused.items()
        ]
        if seen.truncated:
            refusals.append(
                f"{mount_path} holds more than {memory_tree.MAX_FILES} entries; only part "
                "of it was looked at and nothing was deleted from the store."
            )
        notes = self._new(session_id, refusals)  # a refusal is said once; conflicts each time
        actor = {"type": "session_actor", "session_id": session_id}
        for path, content in seen.files.items():
            notes += await self._push(place.store_id, actor, path, content, baseline, mount_path)
        if not seen.truncated:
            for path, (memory_id, sha) in baseline.items():
                if path in seen.files or path in seen.refused:
                    continue
                notes += await self._delete(place.store_id, actor, path, memory_id, sha, mount_path)
        memories = await self.stores.all_memories(place.store_id)
        keep = {p for p in seen.files if p not in baseline}  # new files the store refused
        fresh = await anyio.to_thread.run_sync(
            memory_tree.reconcile, place.root, memories, seen.files, baseline, keep
        )
        await anyio.to_thread.run_sync(memory_tree.save_baseline, place.state, fresh)
        return notes

    async def _push(
        self,
        store_id: str,
        actor: dict[str, Any],
        path: str,
        content: str,
        baseline: Baseline,
        mount_path: str,
    ) -> list[str]:
        known = baseline.get(path)
        sha = sha256_hex(content)
        if known is not None and known[1] == sha:
            return []
        try:
            await self.stores.writable(store_id)
            if known is None:
                await self.stores.write(
                    store_id, new_id("mem"), "created", actor, path=path, content=content
                )
            else:
                await self.stores.write(
                    store_id, known[0], "modified", actor, content=content, expected=known[1]
                )
        except (Conflict, NotFound):
            return [_conflict(mount_path, path)]
        except ApiError as exc:
            return [f"{mount_path}{path} was not saved to the memory store: {exc.message}"]
        return []

    async def _delete(
        self,
        store_id: str,
        actor: dict[str, Any],
        path: str,
        memory_id: str,
        sha: str,
        mount_path: str,
    ) -> list[str]:
        try:
            await self.stores.write(store_id, memory_id, "deleted", actor, expected=sha)
        except NotFound:
            return []
        except Conflict:
            return [_conflict(mount_path, path)]
        return []

    def _new(self, session_id: str, notes: list[str]) -> list[str]:
        told = self._told.setdefault(session_id, set())
        fresh = [n for n in notes if n not in told]
        told.update(fresh)
        return fresh


def _conflict(mount_path: str, path: str) -> str:
    return (
        f"{mount_path}{path} was changed in the memory store by someone else since this "
        "session last saw it; the store's version wins and is now in the file (your change "
        "was not saved). Read it again before editing."
    )
