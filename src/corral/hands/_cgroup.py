"""Per-sandbox cgroups (pids + memory), v1 or v2, created under the server's own cgroups.

Only creates, limits and removes `corral-*` children; never changes the server's own cgroups.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "corral-"


@dataclass(frozen=True, slots=True, kw_only=True)
class CgroupSetup:
    """Where sandbox cgroups go: `parents[controller]`, identical dirs on v2."""

    version: int
    pids_parent: Path
    memory_parent: Path

    @property
    def name(self) -> str:
        return f"cgroup-v{self.version}"

    def create(self, sandbox_id: str, *, memory_bytes: int, max_tasks: int) -> SandboxCgroup:
        """Make the sandbox's cgroup(s) with limits set; no process is in them yet.

        Raises:
            OSError: the cgroup filesystem refused.
        """
        pids_dir = self.pids_parent / f"{PREFIX}{sandbox_id}"
        memory_dir = self.memory_parent / f"{PREFIX}{sandbox_id}"
        dirs = (pids_dir,) if pids_dir == memory_dir else (pids_dir, memory_dir)
        for d in dirs:
            d.mkdir()
        group = SandboxCgroup(version=self.version, pids_dir=pids_dir, memory_dir=memory_dir)
        try:
            (pids_dir / "pids.max").write_text(str(max_tasks))
            if self.version == 1:
                (memory_dir / "memory.limit_in_bytes").write_text(str(memory_bytes))
            else:
                (memory_dir / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (memory_dir / "memory.swap.max").write_text("0")
        except OSError:
            group.remove()
            raise
        return group


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxCgroup:
    """The cgroup directories of one sandbox."""

    version: int
    pids_dir: Path
    memory_dir: Path

    @property
    def dirs(self) -> tuple[Path, ...]:
        same = self.pids_dir == self.memory_dir
        return (self.pids_dir,) if same else (self.pids_dir, self.memory_dir)

    def attach(self, pid: int) -> None:
        """Move `pid` (and, on v1, its threads) in; later children inherit the cgroup."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel has OOM-killed in this cgroup so far."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        return _counter(self.memory_dir / name, "oom_kill")

    def fork_failures(self) -> int:
        """How many forks failed on `pids.max` so far."""
        return _counter(self.pids_dir / "pids.events", "max")

    def kill_all(self) -> None:
        """SIGKILL every process inside (belt and braces: the PID namespace dies anyway)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                (self.pids_dir / "cgroup.kill").write_text("1")
                return
        with contextlib.suppress(OSError):
            for pid in (self.pids_dir / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> bool:
        """rmdir the cgroup(s); False while processes (or zombies) remain."""
        done = True
        for d in self.dirs:
            try:
                d.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _counter(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _mounts() -> list[tuple[str, Path, str, set[str]]]:
    """(fstype, mount point, mount root, super options) of every cgroup mount."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((tail[0], Path(fields[4]), fields[3], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """controller -> this process's cgroup path; "" is the v2 unified hierarchy."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            paths[c] = path
    return paths


def _join(mount: Path, mount_root: str, path: str) -> Path:
    rel = path[len(mount_root) :] if path.startswith(mount_root) else path
    return mount / rel.lstrip("/")


def _usable(parent: Path) -> bool:
    probe = parent / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


def _detect_v2(mounts: list[tuple[str, Path, str, set[str]]], own: dict[str, str]) -> Path | None:
    for fstype, point, root, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        parent = _join(point, root, own[""])
        try:
            enabled = set((parent / "cgroup.subtree_control").read_text().split())
        except OSError:
            continue
        if {"pids", "memory"} <= enabled and _usable(parent):
            return parent
    return None


def _detect_v1(
    mounts: list[tuple[str, Path, str, set[str]]], own: dict[str, str]
) -> dict[str, Path]:
    parents: dict[str, Path] = {}
    for fstype, point, root, options in mounts:
        for controller in ("pids", "memory"):
            if fstype == "cgroup" and controller in options and controller in own:
                parent = _join(point, root, own[controller])
                if _usable(parent):
                    parents[controller] = parent
    return parents


def detect() -> CgroupSetup | None:
    """The cgroup layout usable for sandboxes, or None (then only rlimits apply)."""
    try:
        mounts, own = _mounts(), _own_paths()
    except OSError:
        return None
    if (parent := _detect_v2(mounts, own)) is not None:
        setup = CgroupSetup(version=2, pids_parent=parent, memory_parent=parent)
    elif len(v1 := _detect_v1(mounts, own)) == 2:
        setup = CgroupSetup(version=1, pids_parent=v1["pids"], memory_parent=v1["memory"])
    else:
        return None
    _sweep(setup)
    return setup


def _sweep(setup: CgroupSetup, min_age: float = 60.0) -> None:
    """Remove empty sandbox cgroups a killed server left behind (its sandboxes died with it).

    Only ones older than `min_age`: a fresh empty one may belong to a live server between
    mkdir and attach. Non-empty ones belong to live sandboxes and cannot be removed anyway.
    """
    now = time.time()
    for parent in {setup.pids_parent, setup.memory_parent}:
        with contextlib.suppress(OSError):
            for child in parent.iterdir():
                if child.name.startswith(PREFIX) and now - child.stat().st_mtime > min_age:
                    with contextlib.suppress(OSError):
                        child.rmdir()
