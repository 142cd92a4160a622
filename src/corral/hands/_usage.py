"""Disk usage of a sandbox's writable directories (workspace and outputs), measured by the host.

The sandbox controls every name below those roots, and may rename them during the walk: each
directory is opened relative to its parent's fd with O_NOFOLLOW, so the walk never follows a
symlink and never leaves a root. It reads no file contents. It is bounded: at most
`MAX_ENTRIES` entries and `MAX_DEPTH` levels (so at most that many fds), and a walk cut short
counts as over quota rather than as a partial, too-low number.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MAX_ENTRIES = 200_000
MAX_DEPTH = 128
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@dataclass(slots=True)
class Usage:
    """What a walk found: bytes charged, entries seen, and why it stopped early (if it did)."""

    bytes: int = 0
    entries: int = 0
    cut_short: str = ""
    """Empty when every entry was counted; otherwise the reason (too many entries, too deep)."""
    _inodes: set[tuple[int, int]] = field(default_factory=set)

    def charge(self, st: os.stat_result) -> None:
        """Count one inode once; a sparse file counts at its apparent size, which is what
        anything reading it (outputs collection, copies) has to handle."""
        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in self._inodes:
                return
            self._inodes.add(key)
        used = st.st_blocks * 512
        if stat.S_ISREG(st.st_mode):
            used = max(used, st.st_size)
        self.bytes += used


class _Stop(Exception):
    pass


def measure(
    roots: Sequence[Path], *, max_entries: int = MAX_ENTRIES, max_depth: int = MAX_DEPTH
) -> Usage:
    """Bytes used below `roots` (their own directories included); missing roots count 0."""
    usage = Usage()
    try:
        for root in roots:
            try:
                fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue
            usage.charge(os.fstat(fd))
            _walk(fd, usage, max_entries, max_depth)
    except _Stop:
        pass
    return usage


def _walk(root_fd: int, usage: Usage, max_entries: int, max_depth: int) -> None:
    """Depth-first below `root_fd` (which this closes), one open fd per level."""
    stack: list[tuple[int, Iterator[str]]] = []
    try:
        stack.append((root_fd, iter(_scan(root_fd, usage, max_entries))))
        while stack:
            fd, subdirs = stack[-1]
            name = next(subdirs, None)
            if name is None:
                os.close(stack.pop()[0])
                continue
            if len(stack) >= max_depth:
                usage.cut_short = f"directories nest deeper than {max_depth} levels"
                raise _Stop
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except PermissionError:
                _unreadable(usage)
            except OSError:
                continue  # removed or replaced (say by a symlink) since it was listed
            stack.append((child, iter(())))  # on the stack first, so `finally` closes it
            stack[-1] = (child, iter(_scan(child, usage, max_entries)))
    finally:
        for fd, _ in stack:
            os.close(fd)


def _scan(fd: int, usage: Usage, max_entries: int) -> list[str]:
    """Charge every entry of directory `fd`; returns the names of its subdirectories."""
    subdirs: list[str] = []
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                usage.entries += 1
                if usage.entries > max_entries:
                    usage.cut_short = f"more than {max_entries} files and directories"
                    raise _Stop
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                usage.charge(st)
                if stat.S_ISDIR(st.st_mode):
                    subdirs.append(entry.name)
    except OSError:
        _unreadable(usage)
    return subdirs


def _unreadable(usage: Usage) -> None:
    # What a directory the host cannot list holds is unknown: fail closed, never count it 0.
    usage.cut_short = "a directory the host cannot list (restore its permissions)"
    raise _Stop


def over_quota(usage: Usage, quota: int) -> str | None:
    """The note for the model when `usage` exceeds `quota`, else None."""
    if usage.cut_short:
        return (
            f"disk quota exceeded: /workspace and outputs hold {usage.cut_short}; "
            "delete files to continue"
        )
    if usage.bytes <= quota:
        return None
    return (
        f"disk quota exceeded: /workspace and outputs use {_size(usage.bytes)} of "
        f"{_size(quota)}; delete files to continue"
    )


def _size(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    return f"{n / 2**20:.1f} MiB"
