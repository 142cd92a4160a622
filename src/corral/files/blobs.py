"""`BlobStore`: content-addressed bytes on the local filesystem (sha256 names, atomic writes).

Knows nothing of files' metadata or sessions.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import anyio.to_thread

from corral.errors import DiskFull, PayloadTooLarge, StorageIOError

_CHUNK = 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Blob:
    """A stored blob."""

    sha256: str
    size: int


class BlobStore(Protocol):
    """Where file bytes live."""

    async def put(self, source: BinaryIO, *, max_bytes: int) -> Blob:
        """Store the stream's bytes.

        Raises:
            PayloadTooLarge: the stream is longer than `max_bytes` (nothing is kept).
        """
        ...

    def path(self, sha256: str) -> Path:
        """Host path of a blob (read-only use: mounts and downloads)."""
        ...

    def iter_bytes(self, sha256: str) -> AsyncIterator[bytes]:
        """The blob's bytes in chunks."""
        ...

    async def delete(self, sha256: str) -> None:
        """Remove a blob no file refers to any more."""
        ...


class LocalBlobStore:
    """Blobs under `root/ab/abcdef…`; identical content is stored once."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, sha256: str) -> Path:
        """Host path of a blob."""
        return self.root / sha256[:2] / sha256

    async def put(self, source: BinaryIO, *, max_bytes: int) -> Blob:
        """Hash while copying to a temp file, then rename into place."""
        return await anyio.to_thread.run_sync(self._put_sync, source, max_bytes)

    def _put_sync(self, source: BinaryIO, max_bytes: int) -> Blob:
        try:
            return self._copy_in(source, max_bytes)
        except OSError as exc:
            raise self._storage_failure(exc) from exc

    def _storage_failure(self, exc: OSError) -> OSError | DiskFull | StorageIOError:
        """A full or failing disk as the API error the user can act on (else `exc`)."""
        where = self.root.absolute()
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return DiskFull(
                f"the server's disk is full (files dir {where}); nothing can be stored until "
                "the operator frees space",
                condition=f"disk full: cannot write {where}",
            )
        if exc.errno == errno.EIO:
            return StorageIOError(
                f"the server's disk failed an I/O operation (files dir {where}): {exc}",
                condition=f"disk I/O error on {where} ({exc})",
            )
        return exc

    def _copy_in(self, source: BinaryIO, max_bytes: int) -> Blob:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)  # no sandbox uid may walk in
        digest = hashlib.sha256()
        size = 0
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        try:
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(_CHUNK):
                    size += len(chunk)
                    if size > max_bytes:
                        raise PayloadTooLarge(f"file exceeds the {max_bytes}-byte limit")
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            sha = digest.hexdigest()
            target = self.path(sha)
            target.parent.mkdir(exist_ok=True)
            os.chmod(tmp, 0o444)
            os.replace(tmp, target)
            return Blob(sha256=sha, size=size)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    async def iter_bytes(self, sha256: str) -> AsyncIterator[bytes]:
        """Stream a blob."""
        handle = await anyio.open_file(self.path(sha256), "rb")
        async with handle:
            while chunk := await handle.read(_CHUNK):
                yield chunk

    async def delete(self, sha256: str) -> None:
        """Unlink if present."""
        await anyio.to_thread.run_sync(lambda: self.path(sha256).unlink(missing_ok=True))
