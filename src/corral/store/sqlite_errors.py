"""SQLite's disk failures as errors a user and an operator can act on.

A full disk (SQLITE_FULL) or a failing one (SQLITE_IOERR) surfaces as a bare
`sqlite3.OperationalError`, which the API would answer with a generic 500 and the brain's
scheduler would log with a traceback on every poll. `DiskCondition` turns them into
`DiskFull` (507) / `StorageIOError` (503) naming the data directory, and logs each condition
once when it starts and once when a commit succeeds again.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from pathlib import Path

from corral.errors import DiskFull, StorageFailure, StorageIOError

log = logging.getLogger("corral.store")

_SQLITE_IOERR = 10
_SQLITE_FULL = 13
_SPACE_BACK_BYTES = 1 << 20
"""Free bytes that end a disk-full condition. A full disk still takes the odd small commit
(into the last page of a file), which must not read as "space back" and flap the log."""


class DiskCondition:
    """Classifies one database file's errors and logs its disk's state changes once each."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()
        self._lock = threading.Lock()
        self._failing: StorageFailure | None = None
        """The condition being reported, from its first failure to the next good commit."""

    @property
    def failing(self) -> bool:
        """Whether the last write (or read) failed for want of a working disk."""
        return self._failing is not None

    def classify(self, exc: BaseException) -> BaseException:
        """`exc`, or the storage failure it stands for (logged when its condition starts)."""
        failure = self._failure(exc)
        if failure is None:
            return exc
        failure.__cause__ = exc
        with self._lock:
            starts = self._failing is None or type(self._failing) is not type(failure)
            self._failing = failure
        if starts:
            log.error("%s", failure.condition)
        return failure

    def wrote(self) -> None:
        """A commit succeeded: the disk works again (logged once, if it did not)."""
        if self._failing is None:  # the common case: no lock
            return
        if isinstance(self._failing, DiskFull) and self._free_bytes() < _SPACE_BACK_BYTES:
            return
        with self._lock:
            was, self._failing = self._failing, None
        if was is not None:
            what = "disk space back" if isinstance(was, DiskFull) else "disk I/O recovered"
            log.warning("%s: writes resumed on %s", what, self.path)

    def _free_bytes(self) -> int:
        try:
            stat = os.statvfs(self.path.parent)
        except OSError:
            return 0
        return stat.f_bavail * stat.f_frsize

    def _failure(self, exc: BaseException) -> StorageFailure | None:
        if isinstance(exc, StorageFailure):
            return exc
        if not isinstance(exc, sqlite3.Error):
            return None
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF  # the primary result code
        folder = self.path.parent
        if code == _SQLITE_FULL:
            return DiskFull(
                f"the server's disk is full (data dir {folder}); nothing can be written "
                "until the operator frees space",
                condition=f"disk full: cannot write {self.path}; writes refused until space "
                "returns",
            )
        if code == _SQLITE_IOERR:
            return StorageIOError(
                f"the server's disk failed an I/O operation (data dir {folder}): {exc}",
                condition=f"disk I/O error on {self.path} ({exc}); requests fail until it recovers",
            )
        return None
