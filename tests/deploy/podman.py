"""Podman for the deployment tests, made from Debian packages alone.

No image registry is reachable from CI, so the base image is the `debootstrap --variant=minbase
bookworm` tree the stock-Debian install tests use too (`tests/install/debian_root.py`, cached
once a day), imported. Podman runs with its own configuration and storage in a temporary
directory: Debian's podman works on these machines with runc and cgroupfs only (crun refuses
hybrid cgroups), and a private storage means every run builds from a clean cache and leaves
nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.install.debian_root import bookworm_minbase_tar

BASE_IMAGE = "localhost/corral-base:bookworm"
# Debian packages the tests need: podman with runc (crun refuses hybrid cgroups), netavark
# and aardvark-dns (compose services find each other by name; only Recommends of podman),
# iptables (netavark's firewall driver runs it for every container network; a minimal
# machine lacks it: "netavark: No such file or directory").
PACKAGES = ("podman", "runc", "netavark", "aardvark-dns", "iptables", "debootstrap")

CONTAINERS_CONF = """\
[containers]
default_ulimits = []
log_driver = "k8s-file"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "{root}/tmp"
[network]
network_config_dir = "{root}/cni"
"""
# tmp_dir and network_config_dir are per-root too: with the shared defaults (/run/libpod,
# /etc/cni/net.d) cleaning up this storage would break other podman users' containers.


def ensure_tools() -> None:
    """apt-get install whichever of `PACKAGES` is missing."""
    missing = [pkg for pkg in PACKAGES if not _installed(pkg)]
    if not missing:
        return
    install = ["apt-get", "install", "-y", "-qq", *missing]
    if subprocess.run(install, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=True)
        subprocess.run(install, capture_output=True, check=True)


def _installed(package: str) -> bool:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return done.stdout.endswith(" installed")


class Podman:
    """`podman` (and `podman-compose`) with a private configuration and storage under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.timings: dict[str, float] = {}
        # Storage in memory (~3 GB at most): builds write faster, and removing it is one
        # umount instead of a minute and a half of deleting files from this disk.
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=12g,mode=0700", "corral-podman", str(root)],
            capture_output=True, check=False,
        )  # fmt: skip
        conf = root / "containers.conf"
        storage = root / "storage.conf"
        conf.write_text(CONTAINERS_CONF.format(root=root))
        storage.write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{root / "graph"}"\n'
            f'runroot = "{root / "run"}"\n'
        )
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(conf),
            "CONTAINERS_STORAGE_CONF": str(storage),
        }

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a phase of the test; `report()` lists them."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.timings[name] = time.monotonic() - start

    def report(self) -> str:
        """One line per timed phase."""
        return "\n".join(f"  {name:<34} {secs:7.1f} s" for name, secs in self.timings.items())

    def run(
        self, *args: str, timeout: float = 120, check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`podman ARGS`; raises with podman's stderr when `check` and it fails."""
        return self._exec(["podman", *args], timeout, check, cwd)

    def compose(
        self, *args: str, timeout: float = 180, check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`podman-compose ARGS` from the test environment's own install (PyPI)."""
        command = [sys.executable, "-m", "podman_compose", *args]
        return self._exec(command, timeout, check, cwd)

    def _exec(
        self, command: list[str], timeout: float, check: bool, cwd: Path | None
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            command, env=self.env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
            check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[:4])} … failed ({done.returncode}):\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
            )
        return done

    def build(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        """Start `podman build --pull=never ARGS` (builds run side by side), output to `log`."""
        with log.open("wb") as out:
            return subprocess.Popen(
                ["podman", "build", "--pull=never", *args],
                env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def import_base(self) -> None:
        """The cached Debian tree as `BASE_IMAGE`."""
        self.run("import", str(bookworm_minbase_tar()), BASE_IMAGE, timeout=300)

    def reset(self) -> None:
        """Remove this storage's containers, volumes and networks, then the storage itself.

        Not `podman system reset`: that also wipes state other podman users share."""
        # Images need no `rmi`: unmounting the storage removes their layers.
        for args in (("rm", "-a", "-f"), ("volume", "prune", "-f"), ("network", "prune", "-f")):
            self.run(*args, timeout=300, check=False)
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        inside = (m for m in mounts if m == str(self.root) or m.startswith(f"{self.root}/"))
        for point in sorted(inside, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
