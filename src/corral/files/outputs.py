"""Collect what the agent wrote under /mnt/session/outputs into session-scoped file objects.

Everything about these files is untrusted (the sandbox made them): symlinks are never followed,
only regular files are read, names are cleaned, and count and size are bounded.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import anyio.to_thread

from corral.files.blobs import Blob
from corral.files.service import FileService, clean_filename

MAX_OUTPUT_FILES = 1000


@dataclass(frozen=True, slots=True)
class _Seen:
    size: int
    mtime_ns: int


class OutputCollector:
    """Mirror each session's outputs directory into file objects after tool calls."""

    def __init__(self, files: FileService) -> None:
        self.files = files
        self._seen: dict[tuple[str, str], _Seen] = {}  # a cache only: safe to lose

    async def collect(self, session_id: str, outputs_dir: Path) -> int:
        """Create or update file objects for new/changed outputs; returns how many changed."""
        found = await anyio.to_thread.run_sync(_scan, outputs_dir)
        if not found:
            return 0
        existing = await self.files.session_outputs(session_id)
        changed = 0
        for name, (path, seen) in found.items():
            key = (session_id, name)
            if self._seen.get(key) == seen and name in existing:
                continue
            blob = await self._store(path)
            if blob is None:
                continue
            self._seen[key] = seen
            body = existing.get(name)
            if body is None:
                await self.files.create(
                    blob, filename=name, mime_type=None, scope_session=session_id
                )
            elif body.get("sha256") != blob.sha256:
                await self.files.replace_blob(body, blob)
            else:
                continue
            changed += 1
        return changed

    async def _store(self, path: Path) -> Blob | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None  # vanished, or replaced by a symlink/fifo meanwhile
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            source: BinaryIO = handle
            return await self.files.blobs.put(source, max_bytes=self.files.max_bytes)


def _scan(root: Path) -> dict[str, tuple[Path, _Seen]]:
    """Regular files below `root` by cleaned relative name, never following links."""
    found: dict[str, tuple[Path, _Seen]] = {}
    stack = [(root, "")]
    while stack and len(found) < MAX_OUTPUT_FILES:
        folder, prefix = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            part = clean_filename(entry.name)
            if stat.S_ISDIR(info.st_mode):
                stack.append((Path(entry.path), f"{prefix}{part}/"))
            elif stat.S_ISREG(info.st_mode):
                found[f"{prefix}{part}"] = (Path(entry.path), _Seen(info.st_size, info.st_mtime_ns))
    return found
