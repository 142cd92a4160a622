"""Collect what the agent wrote under /mnt/session/outputs into session-scoped file objects.

Everything about these files is untrusted: the sandbox made them and may swap them while we
look. The tree is read only through `files.beneath` (no symlinks, no other mount, regular
files only, sizes from fstat), names are cleaned, and the number of files and the bytes taken
per call and per session are bounded; what is refused comes back as notes for the tool result.
This module must never open a host path built from names found in that tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from corral.errors import PayloadTooLarge
from corral.files.beneath import Found, Tree
from corral.files.blobs import Blob
from corral.files.service import FileService, clean_output_path

OUTPUTS_DIR = "/mnt/session/outputs"
MAX_NAME = 1024
_GIB = 1024 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputLimits:
    """Bounds on what one session's outputs may turn into."""

    max_files: int = 1000
    """Output file objects per session (checked for every file, not per directory)."""
    max_bytes_per_call: int = _GIB // 2
    """Bytes collected after one tool call."""
    max_bytes_per_session: int = _GIB
    """Bytes of all of a session's output files together (a sparse file counts its size)."""


@dataclass(frozen=True, slots=True)
class _Seen:
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int

    @classmethod
    def of(cls, found: Found) -> _Seen:
        return cls(found.size, found.mtime_ns, found.ctime_ns, found.ino)


@dataclass(slots=True, kw_only=True)
class _Budget:
    """What is left to this collection."""

    files: int
    call: int
    session: int
    per_file: int

    def spend(self, size: int, old_size: int, *, new: bool) -> None:
        """Account for a stored file that replaced `old_size` bytes (0 if `new`)."""
        self.call -= size
        self.session -= size - old_size
        self.files -= int(new)

    def limit(self, old_size: int, limits: OutputLimits) -> tuple[int, str]:
        """The most a file may hold now (replacing `old_size` bytes), and which limit that is
        (named by its fixed total, so the same refusal reads the same at every call)."""
        return min(
            (self.per_file, f"the per-file limit of {self.per_file} bytes"),
            (self.call, f"the outputs limit of {limits.max_bytes_per_call} bytes per call"),
            (
                self.session + old_size,
                f"the session's outputs quota of {limits.max_bytes_per_session} bytes",
            ),
        )


class OutputCollector:
    """Mirror each session's outputs directory into file objects after tool calls."""

    def __init__(self, files: FileService, limits: OutputLimits | None = None) -> None:
        self.files = files
        self.limits = limits or OutputLimits()
        # Caches only (safe to lose): the stat of what was stored, and the notes given.
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._told: dict[str, set[str]] = {}

    async def collect(self, session_id: str, outputs_dir: Path) -> list[str]:
        """Create or update file objects for new/changed outputs.

        Returns notes for the model about what was not collected (each said once).
        """
        if await self.files.store.get_session(session_id) is None:
            return []  # deleted meanwhile: its outputs must not come back
        try:
            tree = await anyio.to_thread.run_sync(Tree, outputs_dir)
        except OSError:
            return []
        try:
            found, truncated = await anyio.to_thread.run_sync(_scan, tree, self.limits.max_files)
            notes = [self._too_many()] if truncated else []
            changed = await self._sync(session_id, tree, found, notes)
        finally:
            tree.close()
        if changed and await self.files.store.get_session(session_id) is None:
            await self.files.delete_session_files(session_id)
        return self._new_notes(session_id, notes)

    async def _sync(
        self, session_id: str, tree: Tree, found: dict[str, Found], notes: list[str]
    ) -> int:
        """Store what changed within the budget; returns how many objects changed."""
        existing = await self.files.session_outputs(session_id)
        used = sum(int(body.get("size_bytes") or 0) for body in existing.values())
        budget = _Budget(
            files=self.limits.max_files - len(existing),
            call=self.limits.max_bytes_per_call,
            session=self.limits.max_bytes_per_session - used,
            per_file=self.files.max_bytes,
        )
        changed = 0
        for name, item in found.items():
            key = (session_id, name)
            if self._seen.get(key) == _Seen.of(item) and name in existing:
                continue  # unchanged since it was stored
            body = existing.get(name)
            if body is None and budget.files <= 0:
                notes.append(self._too_many())
                continue
            old_size = int(body.get("size_bytes") or 0) if body else 0
            stored = await self._store(tree, item, name, budget.limit(old_size, self.limits))
            if isinstance(stored, str):
                notes.append(stored)  # refused (retried at the next call: room may free up)
            elif stored is not None:
                self._seen[key] = _Seen.of(item)
                budget.spend(stored.size, old_size, new=body is None)
                changed += await self._record(session_id, name, body, stored)
        return changed

    async def _record(
        self, session_id: str, name: str, body: dict[str, Any] | None, blob: Blob
    ) -> int:
        """Create or repoint the file object; returns 1 if anything changed."""
        if body is None:
            await self.files.create(
                blob, filename=name, mime_type=None, scope_session=session_id, path=True
            )
        elif body.get("sha256") != blob.sha256:
            await self.files.replace_blob(body, blob)
        else:
            return 0
        return 1

    async def _store(
        self, tree: Tree, item: Found, name: str, limit: tuple[int, str]
    ) -> Blob | str | None:
        """The file's blob, a note saying why it was refused, or None if it is gone."""
        try:
            fd = await anyio.to_thread.run_sync(tree.open_file, item.parts)
        except OSError:
            return None  # vanished, swapped for a symlink, or not a regular file any more
        most, which = limit
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            refusal = f"{OUTPUTS_DIR}/{name} ({{size}} bytes) was not collected: over {which}."
            if size > most:
                return refusal.format(size=size)
            try:
                return await self.files.blobs.put(handle, max_bytes=max(most, 0))
            except PayloadTooLarge:
                return refusal.format(size=f"over {most}")  # it grew while being read

    def _too_many(self) -> str:
        limit = self.limits.max_files
        return f"{OUTPUTS_DIR}: only {limit} output files per session are collected; not the rest."

    def _new_notes(self, session_id: str, notes: list[str]) -> list[str]:
        told = self._told.setdefault(session_id, set())
        fresh = [n for n in dict.fromkeys(notes) if n not in told]
        told.update(fresh)
        return fresh


def _scan(tree: Tree, max_files: int) -> tuple[dict[str, Found], bool]:
    """Regular files by cleaned relative name (the first of names that clean alike wins), and
    whether there were more than `max_files`."""
    found: dict[str, Found] = {}
    for item in tree.walk(max_entries=max_files * 10):
        name = clean_output_path(item.parts)
        if len(name) > MAX_NAME or name in found:
            continue
        if len(found) == max_files:
            return found, True
        found[name] = item
    return found, tree.truncated
