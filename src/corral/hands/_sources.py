"""Host sources of a sandbox's mounts, opened by the server as file descriptors.

bubblewrap gets fds, never paths, so nothing a sandbox planted is followed at (re)provision:
each source is opened beneath its parent (a directory the sandbox cannot write) with
O_NOFOLLOW. The session's writable directories are handed to its uid here, and a layer
is taken back from its build's uid. This module must not open anything below a directory a
sandbox can write by a path it built from names, and must not follow symlinks there.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from corral.errors import HandsError

Owner = tuple[int, int]
"""(uid, gid) that a sandbox runs as on the host."""

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def private_dirs(path: Path) -> None:
    """Create `path` and its missing parents with mode 0700 (existing ones are left as they are)."""
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)


@contextlib.contextmanager
def _parent(path: Path) -> Iterator[int]:
    """The parent directory of `path` (a host directory, never sandbox-writable)."""
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def open_source(path: Path) -> int:
    """An O_PATH fd of a read-only mount's source (a directory, file or socket), never a link.

    Raises:
        HandsError: `invalid_recipe` when it is missing or a symlink.
    """
    try:
        with _parent(path) as parent:
            fd = os.open(path.name, _PATH_FLAGS, dir_fd=parent)
    except OSError as e:
        msg = f"mount source {path} cannot be opened: {e.strerror}"
        raise HandsError("invalid_recipe", msg, retryable=False) from None
    if stat.S_ISLNK(os.fstat(fd).st_mode):
        os.close(fd)
        raise HandsError("invalid_recipe", f"mount source {path} is a symlink", retryable=False)
    return fd


def open_owned_dir(path: Path, owner: Owner) -> int:
    """An fd of the writable directory `path` (created if missing), owned by `owner`, mode 0700.

    A directory first handed to this owner (one an older server or another uid filled) is
    given to it with its whole contents, walked through fds without following links.

    Raises:
        HandsError: `invalid_recipe` when `path` is a symlink or not a directory.
    """
    try:
        with _parent(path) as parent:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path.name, 0o700, dir_fd=parent)
            fd = os.open(path.name, _DIR_FLAGS, dir_fd=parent)
    except OSError as e:
        msg = f"directory {path} cannot be opened: {e.strerror}"
        raise HandsError("invalid_recipe", msg, retryable=False) from None
    try:
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != owner:
            _chown_tree(fd, owner)
            os.fchown(fd, *owner)
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _chown_tree(fd: int, owner: Owner) -> None:
    """Everything beneath directory `fd`: `lchown` only, descending without following links."""
    for _, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)


def seal_tree(path: Path) -> None:
    """Make the tree at `path` the server's (root's), readable by all, writable by it alone.

    Used on a package layer once its build sandbox is gone: later sessions (other uids)
    mount it and must be able to read it but never tamper with it. Modes become 0755 for
    directories and executables, 0644 for the rest: no setuid, setgid or sticky bit is left.
    """
    server = os.geteuid(), os.getegid()
    fd = os.open(path, _DIR_FLAGS)
    try:
        for _, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            for name in (*dirs, *files):
                _seal(name, dir_fd, server)
        os.fchown(fd, *server)
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)


def _seal(name: str, dir_fd: int, owner: Owner) -> None:
    os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
    fd = os.open(name, _PATH_FLAGS, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISLNK(mode):  # a link's own mode is meaningless and cannot be set
            # through the fd's magic link: the very inode just opened, whatever the name is now
            os.chmod(f"/proc/self/fd/{fd}", _sealed_mode(mode))
    finally:
        os.close(fd)


def _sealed_mode(mode: int) -> int:
    return 0o755 if stat.S_ISDIR(mode) or mode & 0o111 else 0o644


def give_to(path: Path, owner: Owner) -> None:
    """Hand one host-made file (the egress proxy's socket) to the sandbox's uid."""
    os.chown(path, *owner, follow_symlinks=False)
