"""A stock Debian 12 root (`debootstrap --variant=minbase bookworm`), built once a day and cached.

The tarball path and its lock are shared with the container tests, which import the same
tarball as their base image: whoever comes first builds it, the other waits on the lock.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

CACHE_DIR = Path("/var/cache/corral-tests")
TARBALL = CACHE_DIR / "bookworm-minbase.tar"
LOCK = CACHE_DIR / "bookworm-minbase.lock"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES = [Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d")]


def debian_mirror() -> str:
    """The host's Debian archive (not -security), read from its apt sources, one-line or deb822.

    These machines reach only the mirror apt is configured with, so debootstrap must use it.
    """
    files: list[Path] = []
    for source in SOURCES:
        if source.is_dir():
            files += sorted(p for p in source.iterdir() if p.suffix in (".list", ".sources"))
        elif source.is_file():
            files.append(source)
    uri = re.compile(r"(?:^deb\s+(?:\[[^]]*\]\s+)?|^URIs:\s*)(\S+)", re.M)
    for path in files:
        for url in uri.findall(path.read_text()):
            if re.search(r"/debian/?$", url):
                return url.rstrip("/")
    return DEFAULT_MIRROR


def _built_today(path: Path) -> bool:
    if not path.exists():
        return False
    built = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC).date()
    return built == datetime.now(tz=UTC).date()


def bookworm_minbase_tar() -> Path:
    """The cached tarball of a minbase bookworm root, rebuilt when it was not built today.

    Keyed by date so security updates reach the tests within a day without a rebuild per run.
    """
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _built_today(TARBALL):
            _build(TARBALL)
    return TARBALL


def _build(target: Path) -> None:
    if shutil.which("debootstrap") is None:
        subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix="build-") as tmp:
        root = Path(tmp) / "root"
        subprocess.run(
            ["debootstrap", "--variant=minbase", "bookworm", str(root), debian_mirror()],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        # debootstrap leaves the root as private as the temporary folder it is in; a Debian
        # `/` is 0755, or no user but root (apt's _apt, a sandbox's uid) can reach anything.
        root.chmod(0o755)
        partial = Path(tmp) / target.name
        subprocess.run(
            ["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."], check=True
        )
        # Readers that do not take the lock still see either the old tarball or the new one.
        os.replace(partial, target)
