"""Session directories on the data dir (`<root>/<session id>/`, holding the sandbox's
`workspace` and `outputs`) and the lock that tells every process sharing that directory
whether a sandbox still uses them.

A pool holds a shared `flock` on `<root>/<id>/.sandbox.lock` for as long as its sandbox
lives (the kernel drops it if the process dies); removal takes the lock exclusively, so it
never runs under a live sandbox. The lock file sits beside the bind-mounted directories,
out of every sandbox's sight. Removal walks beneath directory fds and never follows a link
a sandbox planted. This module must not know about sessions' rows or the database.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio

log = logging.getLogger("corral.hands")
LOCK_NAME = ".sandbox.lock"
_SESSION_ID = re.compile(r"[A-Za-z0-9_]{1,128}")


class DirBusy(Exception):
    """The session directory is being removed; no sandbox may start on it."""


class DirHold:
    """A shared lock on one session directory: a sandbox uses it until `release`."""

    def __init__(self, fd: int, on_release: Callable[[], None]) -> None:
        self._fd: int | None = fd
        self._on_release = on_release

    def release(self) -> None:
        """Drop the lock (closing the fd drops it); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            self._on_release()


class SessionDirs:
    """`<root>/<session id>/` for every session: where sandboxes' files outlive them.

    Holds are also counted in memory: on filesystems that emulate `flock` with POSIX locks
    (NFS), locks of one process never conflict with each other, and the API and the pool of
    an embedded server are one process.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._held: Counter[str] = Counter()

    def path(self, session_id: str) -> Path:
        """The session's directory (it may not exist).

        Raises:
            ValueError: the id could name something other than one directory under root.
        """
        if not _SESSION_ID.fullmatch(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        return self.root / session_id

    async def hold(self, session_id: str) -> DirHold:
        """Mark the directory as used by a sandbox (creating it), until `release()`.

        Raises:
            DirBusy: a removal holds the directory right now.
        """
        fd = await anyio.to_thread.run_sync(self._lock_shared, self.path(session_id))
        self._held[session_id] += 1
        return DirHold(fd, lambda: self._unhold(session_id))

    def _unhold(self, session_id: str) -> None:
        self._held[session_id] -= 1
        if self._held[session_id] <= 0:
            del self._held[session_id]

    @staticmethod
    def _lock_shared(path: Path) -> int:
        path.mkdir(parents=True, exist_ok=True)
        fd = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirBusy(f"{path.name} is being removed") from None
        return fd

    @contextlib.asynccontextmanager
    async def exclusive(self, session_id: str) -> AsyncIterator[bool]:
        """Yield True while no process holds the directory (no sandbox uses it anywhere;
        also when it does not exist), False when one does. Never waits for a holder."""
        path = self.path(session_id)
        if self._held[session_id]:
            yield False
            return
        fd = await anyio.to_thread.run_sync(self._try_exclusive, path)
        try:
            yield fd is not None
        finally:
            if fd is not None and fd >= 0:
                os.close(fd)

    @staticmethod
    def _try_exclusive(path: Path) -> int | None:
        """-1 when the directory is absent, a locked fd when free, None when held."""
        try:
            fd = _open_lock(path)
        except FileNotFoundError:
            return -1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    async def remove(self, session_id: str) -> bool:
        """Delete the directory tree; True when it is gone. Call inside `exclusive`.

        Entries may belong to the sandbox's uid and may be links to anywhere: the walk is
        fd-based (`shutil.rmtree.avoids_symlink_attacks`), so a link is unlinked, never
        followed. Entries that cannot be removed are logged and left.
        """
        path = self.path(session_id)
        if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux always has it
            log.error("not removing %s: this platform's rmtree may follow symlinks", path)
            return False
        failures: list[str] = []

        def failed(function: Any, name: str, info: Any) -> None:
            if not isinstance(info[1], FileNotFoundError):
                failures.append(f"{function.__name__} {name}: {info[1]}")

        await anyio.to_thread.run_sync(lambda: shutil.rmtree(path, onerror=failed))
        for failure in failures[:5]:
            log.warning("removing session directory: %s", failure)
        return not path.exists()


def _open_lock(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path / LOCK_NAME, flags, 0o600)
