"""Host uids for sandboxes: one per session from a configured range, unique among every
process that shares the data dir, and the same for a session every time until it is freed.

A uid is taken by creating `<root>/<uid>` with O_EXCL (the file holds the session id), so two
processes can never hand one uid to two sessions; `<root>/by-session/<id>` remembers which
uid a session holds. An flock on `<root>/.lock` serialises allocations so one session cannot
end up with two. This module must not start processes or touch files outside `<root>`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from corral.errors import HandsError

_SESSION_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_SPECIAL = (0, 65534, 65535)
"""root, nobody, and the 16-bit -1: never a sandbox's uid."""
_LAST_VALID = 2**32 - 2
"""(uid_t) -1 means "unchanged" to setresuid and chown."""


@dataclass(frozen=True, slots=True)
class UidRange:
    """Inclusive range of host uids (and the gids of the same numbers) for sandboxes."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 0 < self.first <= self.last <= _LAST_VALID:
            raise ValueError(f"uid range {self.first}-{self.last}: need 0 < first <= last < 2^32-1")
        if any(self.first <= special <= self.last for special in _SPECIAL):
            raise ValueError(f"uid range {self.first}-{self.last} contains 0, 65534 or 65535")

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    @classmethod
    def parse(cls, text: str) -> UidRange:
        """From "FIRST-LAST", e.g. "1879048192-1879113727".

        Raises:
            ValueError: not two integers, or a range `__post_init__` refuses.
        """
        first, sep, last = text.strip().partition("-")
        if not sep or not first.strip().isdigit() or not last.strip().isdigit():
            raise ValueError(f"uid range must look like FIRST-LAST, got {text!r}")
        return cls(int(first), int(last))


def mapped_ranges(id_map: str) -> list[tuple[int, int]]:
    """The ids usable in this user namespace as inclusive (first, last) pairs, from the text
    of `/proc/self/uid_map` (or gid_map): lines of `inside outside count`. Outside any user
    namespace it is one line mapping every id."""
    ranges = []
    for line in id_map.splitlines():
        fields = line.split()
        if len(fields) == 3 and all(f.isdigit() for f in fields) and int(fields[2]) > 0:
            inside, count = int(fields[0]), int(fields[2])
            ranges.append((inside, inside + count - 1))
    return sorted(ranges)


def covered(wanted: UidRange, ranges: list[tuple[int, int]]) -> bool:
    """Whether every id of `wanted` lies in `ranges` (ranges that touch count as one)."""
    position = wanted.first
    for first, last in sorted(ranges):
        if first <= position <= last:
            position = last + 1
            if position > wanted.last:
                return True
    return False


class UidAllocator:
    """Allocates, looks up and frees sessions' uids under `root` (blocking: call in a thread)."""

    def __init__(self, root: Path, uids: UidRange) -> None:
        self.root = root
        self.uids = uids

    def allocate(self, session_id: str) -> int:
        """The session's uid: the one it already holds, or a free one taken now.

        Probing starts at a hash of the session id, so a session usually lands on the same
        uid even across data dirs, and collisions only cost a few failed O_EXCL creates.

        Raises:
            HandsError: `invalid_recipe` for an id that cannot name a file,
                `uids_exhausted` when every uid of the range is taken.
        """
        _check_id(session_id)
        with self._locked():
            held = self._held(session_id)
            if held is not None:
                return held
            uid = self._take(session_id)
            _write_atomically(self._index(session_id), f"{uid}\n")
            return uid

    def lookup(self, session_id: str) -> int | None:
        """The uid the session holds, if any."""
        _check_id(session_id)
        with self._locked():
            return self._held(session_id)

    def free(self, session_id: str) -> None:
        """Give the session's uid back to the range; idempotent.

        Call only once no process runs as that uid and its files are gone (session deletion):
        the next session to get the uid would own whatever is left.
        """
        _check_id(session_id)
        with self._locked():
            uid = self._held(session_id)
            if uid is not None:
                (self.root / str(uid)).unlink(missing_ok=True)
            self._index(session_id).unlink(missing_ok=True)

    def _index(self, session_id: str) -> Path:
        return self.root / "by-session" / session_id

    def _held(self, session_id: str) -> int | None:
        try:
            uid = int(self._index(session_id).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return uid if self._owner(uid) == session_id else None

    def _owner(self, uid: int) -> str | None:
        try:
            return (self.root / str(uid)).read_text().strip()
        except FileNotFoundError:
            return None

    def _take(self, session_id: str) -> int:
        size, first = self.uids.size, self.uids.first
        start = int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:8], "big") % size
        for step in range(size):
            uid = first + (start + step) % size
            try:
                fd = os.open(self.root / str(uid), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                if self._owner(uid) == session_id:  # taken before a crash lost the index
                    return uid
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(session_id + "\n")
            return uid
        msg = f"all {size} sandbox uids ({self.uids.first}-{self.uids.last}) are taken"
        raise HandsError("uids_exhausted", msg, retryable=False)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.root / "by-session").mkdir(mode=0o700, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _check_id(session_id: str) -> None:
    if not _SESSION_ID.fullmatch(session_id):
        msg = f"session id {session_id!r} cannot have a sandbox uid"
        raise HandsError("invalid_recipe", msg, retryable=False)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
