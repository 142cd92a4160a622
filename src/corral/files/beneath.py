"""Read a directory tree a sandbox controls, strictly beneath a directory fd the host opened.

Every component is resolved by the kernel with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_XDEV)` (or, where openat2 is missing, one `O_NOFOLLOW` open per component plus an
`st_dev` check), directories are listed from their fd and files are opened relative to the
root fd and checked with `fstat`. This module must never build a host path from names the
sandbox chose, follow a symlink, leave the root's mount, or hand out anything but regular files.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

SYS_OPENAT2 = 437  # the same number on every architecture (added after the tables were unified)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class NotRegularFile(OSError):
    """The name is a directory, FIFO, socket or device: nothing the host should read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Found:
    """A regular file seen while listing (its stat comes from the listing, not an open)."""

    parts: tuple[str, ...]
    """Raw names from the root down (untrusted: display them only after cleaning)."""
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int


def openat2(dir_fd: int, path: str, flags: int, resolve: int = _RESOLVE) -> int:
    """The raw openat2 system call; raises OSError with the kernel's errno."""
    how = _OpenHow(flags=flags, mode=0, resolve=resolve)
    fd = _libc.syscall(
        ctypes.c_long(SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


def openat2_available(dir_fd: int) -> bool:
    """Whether this kernel (and any seccomp filter around us) lets openat2 through."""
    try:
        os.close(openat2(dir_fd, ".", _DIR_FLAGS))
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            return False
        raise
    return True


def _check_parts(parts: tuple[str, ...]) -> None:
    for name in parts:
        if not name or name in (".", "..") or "/" in name or "\0" in name:
            raise OSError(errno.EINVAL, "not a plain name", name)


class Tree:
    """A host directory opened once; everything below it is reached only through its fd.

    The root path itself must be one the host chose (e.g. a session's outputs directory); its
    last component is opened with O_NOFOLLOW all the same.
    """

    def __init__(self, root: Path, *, use_openat2: bool | None = None) -> None:
        self.fd = os.open(root, _DIR_FLAGS)
        self.dev = os.fstat(self.fd).st_dev
        self.use_openat2 = openat2_available(self.fd) if use_openat2 is None else use_openat2
        self.truncated = False
        """Set when `walk` stopped at its entry limit."""

    def __enter__(self) -> Tree:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the root fd (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(self, parts: tuple[str, ...], flags: int) -> int:
        """An fd for `parts` below the root, resolved without symlinks or mount crossings.

        Raises:
            OSError: missing, a symlink anywhere on the way (ELOOP), another mount (EXDEV).
        """
        _check_parts(parts)
        if not parts:
            return os.dup(self.fd)
        if self.use_openat2:
            return openat2(self.fd, "/".join(parts), flags | os.O_CLOEXEC)
        return self._open_by_component(parts, flags)

    def _open_by_component(self, parts: tuple[str, ...], flags: int) -> int:
        """The fallback: each directory opened with O_NOFOLLOW relative to its parent's fd."""
        fd = os.dup(self.fd)
        try:
            for name in parts[:-1]:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
                self._same_mount(fd, name)
            last = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        finally:
            os.close(fd)
        try:
            self._same_mount(last, parts[-1])
        except OSError:
            os.close(last)
            raise
        return last

    def _same_mount(self, fd: int, name: str) -> None:
        if os.fstat(fd).st_dev != self.dev:
            raise OSError(errno.EXDEV, "crosses a mount", name)

    def open_file(self, parts: tuple[str, ...]) -> int:
        """A read-only fd of a regular file below the root (a hard link is fine: same mount).

        Raises:
            NotRegularFile: it is something else (FIFOs are opened non-blocking to check).
            OSError: as for `open`.
        """
        fd = self.open(parts, _FILE_FLAGS)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotRegularFile(errno.EINVAL, "not a regular file", "/".join(parts))
        return fd

    def walk(self, *, max_entries: int = 100_000, max_depth: int = 32) -> Iterator[Found]:
        """Regular files below the root: each directory's files (by name), then its subdirs.

        Symlinks, FIFOs, sockets and devices are skipped; a directory that became a symlink or
        vanished since it was listed is skipped. No fd is held open across a `yield`. Listing
        stops after `max_entries` directory entries, and directories deeper than `max_depth`
        are not entered (either sets `truncated`).
        """
        pending: list[tuple[str, ...]] = [()]
        budget = max_entries
        while pending:
            parts = pending.pop()
            listing = self._list(parts, budget + 1)  # one more than allowed: was it cut?
            cut = len(listing) > budget
            listing = listing[:budget]
            budget -= len(listing)
            subdirs = []
            for name, info in sorted(listing, key=lambda item: item[0]):
                if stat.S_ISREG(info.st_mode):
                    yield Found(
                        parts=(*parts, name),
                        size=info.st_size,
                        mtime_ns=info.st_mtime_ns,
                        ctime_ns=info.st_ctime_ns,
                        ino=info.st_ino,
                    )
                elif stat.S_ISDIR(info.st_mode):
                    if len(parts) >= max_depth:
                        self.truncated = True
                        continue
                    subdirs.append((*parts, name))
            if cut or (budget <= 0 and pending + subdirs):
                self.truncated = True
                return
            pending.extend(reversed(subdirs))

    def _list(self, parts: tuple[str, ...], budget: int) -> list[tuple[str, os.stat_result]]:
        """(name, lstat) of up to `budget` entries of one directory, listed from its own fd."""
        try:
            fd = self.open(parts, _DIR_FLAGS)
        except OSError:
            return []  # vanished, or swapped for a symlink since its parent was listed
        out: list[tuple[str, os.stat_result]] = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if len(out) >= budget:
                        break
                    try:
                        out.append((entry.name, entry.stat(follow_symlinks=False)))
                    except OSError:
                        continue
        except OSError:
            return out
        finally:
            os.close(fd)
        return out
