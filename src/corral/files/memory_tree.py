"""Read and write a memory store's mount directory, which a sandbox controls (read-write
mounts) and may have filled with anything: symlinks, FIFOs, huge or binary files, names that
are not valid memory paths.

Reads go through `files.beneath.Tree` (no symlinks, no other mount, regular files only, at
most `MAX_CONTENT_BYTES + 1` bytes read). Writes and deletions open each parent directory
through the same tree and then act on one plain name with `O_NOFOLLOW`, so nothing outside
the mount can be reached whatever the sandbox planted. Everything here is blocking: call it
from a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from corral.files.beneath import Tree
from corral.wire.memory_stores import MAX_CONTENT_BYTES, content_problem, path_problem

MAX_FILES = 2000
"""Directory entries looked at per scan; beyond that the scan is `truncated`."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(slots=True)
class Scan:
    """What a mount holds: valid memories by path, and what cannot be saved."""

    files: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    """Path (as displayed) -> why it is not saved; such paths are never taken as deleted."""
    truncated: bool = False


def scan(root: Path) -> Scan:
    """Every regular file below `root` that can be a memory, read safely."""
    out = Scan()
    with Tree(root) as tree:
        for found in tree.walk(max_entries=MAX_FILES):
            path = "/" + "/".join(found.parts)
            problem = path_problem(path)
            if problem:  # shown escaped: control characters and bad bytes stay visible
                out.refused[ascii(path)[1:-1]] = f"path {problem}"
                continue
            if found.size > MAX_CONTENT_BYTES:
                out.refused[path] = f"is {found.size} bytes; at most {MAX_CONTENT_BYTES}"
                continue
            content = _read(tree, found.parts)
            if isinstance(content, str):
                out.files[path] = content
            else:
                out.refused[path] = content.reason
        out.truncated = tree.truncated
    return out


@dataclass(frozen=True, slots=True)
class _Refused:
    reason: str


def _read(tree: Tree, parts: tuple[str, ...]) -> str | _Refused:
    try:
        fd = tree.open_file(parts)
    except OSError:
        return _Refused("could not be read (not a regular file, or it changed)")
    try:
        data = bytearray()
        while len(data) <= MAX_CONTENT_BYTES:
            chunk = os.read(fd, MAX_CONTENT_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError:
        return _Refused("could not be read")
    finally:
        os.close(fd)
    if len(data) > MAX_CONTENT_BYTES:
        return _Refused(f"is more than {MAX_CONTENT_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _Refused("is not UTF-8 text")
    why = content_problem(text)
    return _Refused(f"content {why}") if why else text


def write(root: Path, path: str, content: str) -> bool:
    """Make the file at memory `path` hold `content` (parents created), owned like `root`;
    False if the tree's shape prevents it (a file where a directory must be, a name too
    long, a directory or special file at the path)."""
    parts = tuple(path[1:].split("/"))
    try:
        with Tree(root) as tree:
            owner = os.fstat(tree.fd)
            parent = _parent(tree, parts[:-1], owner)
            try:
                fd = os.open(parts[-1], _WRITE_FLAGS, 0o644, dir_fd=parent)
            finally:
                os.close(parent)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return False
                os.fchown(fd, owner.st_uid, owner.st_gid)
                os.fchmod(fd, 0o644)
                view = memoryview(content.encode("utf-8"))
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
    except OSError:
        return False
    return True


def _parent(tree: Tree, parts: tuple[str, ...], owner: os.stat_result) -> int:
    """An fd of the directory `parts`, creating missing ones (owned like the root)."""
    fd = tree.open((), _DIR_FLAGS)
    for depth, name in enumerate(parts):
        try:
            os.mkdir(name, 0o755, dir_fd=fd)
            os.chown(name, owner.st_uid, owner.st_gid, dir_fd=fd, follow_symlinks=False)
        except FileExistsError:
            pass
        except OSError:
            os.close(fd)
            raise
        os.close(fd)
        fd = tree.open(parts[: depth + 1], _DIR_FLAGS)
    return fd


def remove(root: Path, path: str) -> None:
    """Delete the file at memory `path` if it is one (never a directory or beyond a link)."""
    parts = tuple(path[1:].split("/"))
    with contextlib.suppress(OSError), Tree(root) as tree:
        parent = tree.open(parts[:-1], _DIR_FLAGS)
        try:
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
            if stat.S_ISREG(info.st_mode):
                os.unlink(parts[-1], dir_fd=parent)
        finally:
            os.close(parent)


def fresh_dir(path: Path, mode: int) -> None:
    """Replace `path` (whatever a sandbox left there) by an empty directory of ours.

    `shutil.rmtree` removes a tree without following symlinks in it (fd-based on Linux).
    """
    if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux always has it
        raise OSError(errno.ENOTSUP, "no symlink-safe rmtree on this platform")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.mkdir(mode=mode)
    os.chmod(path, mode)


# ---- the mount's baseline: what the store held when the mount was last made to match it ----

Baseline = dict[str, tuple[str, str]]
"""Memory path -> (memory id, content sha256) as last written into the mount."""


class StoredMemory(Protocol):
    """A memory as the store (server side) or the API (a worker) gives it."""

    @property
    def id(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def content(self) -> str | None: ...
    @property
    def content_sha256(self) -> str: ...


def materialise(root: Path, memories: Sequence[StoredMemory]) -> Baseline:
    """Write every memory into a fresh mount; the baseline of what was written."""
    baseline: Baseline = {}
    for memory in memories:
        if write(root, memory.path, memory.content or ""):
            baseline[memory.path] = (memory.id, memory.content_sha256)
    return baseline


def reconcile(
    root: Path,
    memories: Sequence[StoredMemory],
    local: dict[str, str],
    baseline: Baseline,
    keep: set[str],
) -> Baseline:
    """Make the mount match the store (after the agent's changes were pushed): files the
    store holds are (re)written where they differ, files it no longer holds removed, except
    new local files the store refused (`keep`, retried at the next call)."""
    fresh: Baseline = {}
    remote = {m.path for m in memories}
    for memory in memories:
        content = memory.content or ""
        if local.get(memory.path) == content or write(root, memory.path, content):
            fresh[memory.path] = (memory.id, memory.content_sha256)
    for path in set(local) | set(baseline):
        if path not in remote and path not in keep:
            remove(root, path)
    return fresh


def load_baseline(state: Path) -> Baseline:
    """The saved baseline; empty when there is none (or it is unreadable)."""
    try:
        raw = json.loads(state.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): (str(v[0]), str(v[1])) for k, v in raw.items()}


def save_baseline(state: Path, baseline: Baseline) -> None:
    """Replace the saved baseline atomically."""
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: list(v) for k, v in baseline.items()}))
    tmp.replace(state)
