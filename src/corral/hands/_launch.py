"""Launcher run as root just before bubblewrap: stage the mount sources, drop to the sandbox's
uid, exec bwrap. Standalone: the host's Python runs this file (stdlib only, no corral imports).

bwrap then runs unprivileged, and (0.8) resolves each `--bind-fd` fd back to a path it must be
able to walk; the data dir is root's and 0700. So this clones the mount of every passed fd
(`open_tree`, detached: the host's mount table never changes), enters a mount namespace of
its own, attaches the clones to a small tmpfs that only this process sees, reopens each fd
there under the same number, and only then drops to the uid. No name is looked up on the
way, so no link is followed. It must not run anything but bwrap.

Usage: launch.py UID GID FD[,FD...] -- BWRAP [ARG...]
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_REC, MS_PRIVATE = 0x4000, 0x40000
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same on every architecture (added in 5.2)
OPEN_TREE_CLONE, AT_EMPTY_PATH, MOVE_MOUNT_F_EMPTY_PATH = 0x1, 0x1000, 0x4
STAGES = ("/run", "/mnt", "/media", "/srv")
"""Where the tmpfs goes in the private namespace: any real directory bwrap has no use for
(never /tmp, which bwrap mounts over, nor /usr, /lib*, /proc or /dev, which it reads)."""

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _stage_dir() -> str:
    for path in STAGES:
        if os.path.isdir(path) and not os.path.islink(path):
            return path
    raise OSError(f"none of {', '.join(STAGES)} is a directory to stage mounts on")


def stage(fds: list[int]) -> None:
    """Re-home every fd onto a private tmpfs that any uid can walk (names are the fd numbers)."""
    # Clones first: a mount can be cloned only from the namespace it lives in.
    clones = {
        fd: _check(
            _libc.syscall(SYS_OPEN_TREE, fd, b"", OPEN_TREE_CLONE | AT_EMPTY_PATH | os.O_CLOEXEC),
            f"open_tree {fd}",
        )
        for fd in fds
    }
    _check(_libc.unshare(CLONE_NEWNS), "unshare")
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    base = _stage_dir()
    _mount("corral", base, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0711,size=64k")
    for fd, clone in clones.items():
        target = f"{base}/{fd}"
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.mkdir(target, 0o700)
        else:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        flags = MOVE_MOUNT_F_EMPTY_PATH
        _check(_libc.syscall(SYS_MOVE_MOUNT, clone, b"", -100, target.encode(), flags), target)
        os.close(clone)
        staged = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        os.dup2(staged, fd)  # the same number, now naming a path the uid can walk
        os.close(staged)


def main(argv: list[str]) -> None:
    uid, gid, fd_list, sep, *command = argv
    if sep != "--" or not command:
        raise SystemExit(__doc__)
    os.chdir("/")
    stage([int(fd) for fd in fd_list.split(",") if fd])
    os.setgroups([])
    os.setresgid(int(gid), int(gid), int(gid))
    os.setresuid(int(uid), int(uid), int(uid))
    os.execve(command[0], command, {})


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except OSError as e:
        sys.stderr.write(f"corral launcher: {e}\n")
        sys.exit(1)
