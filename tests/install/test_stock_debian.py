"""`make demo` and `make test` from a fresh clone on a stock Debian 12 whose only Python is python3.

The root is `debootstrap --variant=minbase bookworm` plus Debian's `python3` and `make`: no pip,
no venv module, no uv, and python3 externally managed (PEP 668). Slow (minutes; it downloads
from the Debian mirror and PyPI), so it runs only with CORRAL_TEST_STOCK_DEBIAN=1, as `.ci/run`
sets; run it alone with `CORRAL_TEST_STOCK_DEBIAN=1 uv run pytest -m deploy tests/install`.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.install.debian_root import bookworm_minbase_tar

pytestmark = [
    pytest.mark.deploy,
    pytest.mark.skipif(
        os.environ.get("CORRAL_TEST_STOCK_DEBIAN") != "1",
        reason="slow; set CORRAL_TEST_STOCK_DEBIAN=1 to run",
    ),
    pytest.mark.timeout(1800),
]

REPO = Path(__file__).resolve().parents[2]
CLONE = "root/work/corral"
"""An ordinary folder of root's, relative to the Debian root, where the clone goes."""
CA_INSIDE = "/run/corral-ca.crt"
MAKE_TEST_FILES = ("tests/install/test_make_uv.py", "tests/console/test_console_static.py")
"""What `make test` runs there: enough to prove its installs (chromium included) and its pytest
run work; the CI job runs the whole suite on the host already."""

# A private mount namespace whose root is a tmpfs holding the Debian tree (pivot_root, not
# chroot: inside a chroot the kernel refuses the user namespaces bubblewrap makes for the
# demo's sandboxes). The tmpfs dies with the namespace, so nothing is left to delete. The
# host's CA bundle is bind-mounted read-only, never copied into the tree.
ENTER = f"""
set -eu
root=$1 tarball=$2 repo=$3 ca=$4; shift 4
mount -t tmpfs -o size=8g corral-stock-debian "$root"
tar -C "$root" -xf "$tarball"
chmod 0755 "$root"  # as on any Debian, whatever mode the tarball's ./ carries
cp /etc/resolv.conf "$root/etc/resolv.conf"
git clone --quiet "$repo" "$root/{CLONE}"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
touch "$root{CA_INSIDE}"
mount --bind "$ca" "$root{CA_INSIDE}"
mount -o remount,bind,ro "$root{CA_INSIDE}"
cd "$root"
mkdir .host
pivot_root . .host
umount -l /.host
rmdir /.host
exec chroot / "$@"
"""

# What the operator types, after checking the machine really is stock (`! cmd` would not stop
# `set -e`, hence `cmd && exit 1`).
INSIDE = f"""
set -euxo pipefail
apt-get update -qq
apt-get install -y -qq --no-install-recommends python3 make >/dev/null
test -f /usr/lib/python3.11/EXTERNALLY-MANAGED
command -v uv && exit 1
python3 -m pip --version && exit 1
python3 -c 'import ensurepip' && exit 1
cd /{CLONE}
make demo
test -s corral-demo-outputs/server.log
make test PYTEST_ARGS="{" ".join(MAKE_TEST_FILES)}" | tee /tmp/make-test.log
grep -q ' passed' /tmp/make-test.log
grep -q 'skipped' /tmp/make-test.log && exit 1
df -h / >&2
"""


def _ca_bundle() -> str:
    """The bundle this machine's TLS inspection needs (the system one if none is named)."""
    for name in ("SSL_CERT_FILE", "PIP_CERT"):
        if os.environ.get(name):
            return os.environ[name]
    return "/etc/ssl/certs/ca-certificates.crt"


def _inside_env() -> list[str]:
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "DEBIAN_FRONTEND": "noninteractive",
        "SSL_CERT_FILE": CA_INSIDE,
        "PIP_CERT": CA_INSIDE,
    }
    # Other test processes run sandboxes on this host at the same time: keep to this one's uids.
    if os.environ.get("CORRAL_SANDBOX_UID_RANGE"):
        env["CORRAL_SANDBOX_UID_RANGE"] = os.environ["CORRAL_SANDBOX_UID_RANGE"]
    return [f"{k}={v}" for k, v in env.items()]


def test_make_demo_and_test_from_a_fresh_clone_on_stock_debian(tmp_path: Path) -> None:
    started = time.monotonic()
    tarball = bookworm_minbase_tar()
    done = subprocess.run(
        ["unshare", "--mount", "--pid", "--fork", "--propagation", "private"]
        + ["sh", "-c", ENTER, "enter", str(tmp_path), str(tarball), str(REPO), _ca_bundle()]
        + ["/usr/bin/env", "-i", *_inside_env(), "/bin/bash", "-c", INSIDE],
        capture_output=True,
        text=True,
        timeout=1700,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "solved" in done.stdout
    print(f"stock Debian make demo and make test: {time.monotonic() - started:.0f} s wall")
