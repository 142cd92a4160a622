"""Which uv `make install` runs: the one on PATH first, else python3's module, else a bootstrap.

`make -n` prints the commands without running them, so these check the choice in a second;
the stock Debian test (test_stock_debian.py) runs the bootstrap for real.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def _planned(path: str, home: Path) -> list[str]:
    """`make -n install`'s commands for a user with this PATH and HOME (and no UV set)."""
    env = {k: v for k, v in os.environ.items() if k not in ("UV", "XDG_CACHE_HOME", "MAKEFLAGS")}
    env |= {"PATH": path, "HOME": str(home)}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "install"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.fixture
def system_python3() -> None:
    """Debian's own python3 (no uv module in it), as on a stock machine."""
    probe = subprocess.run(["/usr/bin/python3", "-m", "uv", "--version"], capture_output=True)
    if probe.returncode == 0:
        pytest.skip("/usr/bin/python3 has a uv module here")


@pytest.mark.usefixtures("system_python3")
def test_uses_the_uv_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text("#!/bin/sh\necho 'uv 0.0.0'\n")
    uv.chmod(0o755)
    planned = _planned(f"{bin_dir}:{SYSTEM_PATH}", tmp_path)
    assert any(line.startswith("uv sync --frozen") for line in planned), planned


@pytest.mark.usefixtures("system_python3")
def test_without_uv_bootstraps_a_private_one_not_the_system_python(tmp_path: Path) -> None:
    planned = _planned(SYSTEM_PATH, tmp_path)
    bootstrap = tmp_path / ".cache/corral/uv-bootstrap"
    assert any(line.startswith(f"{bootstrap}/bin/uv sync --frozen") for line in planned), planned
    assert not any("python3 -m pip install" in line for line in planned), planned
