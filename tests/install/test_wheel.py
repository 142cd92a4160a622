"""The wheel `make dist` builds, installed with pipx as the README says, is a working `corral`.

pipx puts the wheel and its dependencies from PyPI in a venv of its own, away from the
checkout: the console's static files and everything `corral demo` needs must be in the wheel,
since nothing of the source tree is there to fall back on.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server import free_port

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


def _uv() -> list[str]:
    """The uv `make` runs (`make test` passes it as CORRAL_TEST_UV): on a fresh machine that is
    the Makefile's own bootstrap copy, which is not on PATH."""
    if os.environ.get("CORRAL_TEST_UV"):
        return shlex.split(os.environ["CORRAL_TEST_UV"])
    found = shutil.which("uv")
    if found is None:
        pytest.skip("no uv: run through `make test`, or put uv on PATH")
    return [found]


def _pipx() -> list[str]:
    """Debian's `pipx` if installed, else pipx from PyPI in a throwaway venv of uv's."""
    found = shutil.which("pipx")
    return [found] if found else [*_uv(), "tool", "run", "--from", "pipx", "pipx"]


@pytest.fixture(scope="module")
def corral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist`, then `pipx install dist/corral-*.whl`: the `corral` pipx put on its PATH."""
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        ["make", "--no-print-directory", "dist", f"DIST_DIR={dist}"], cwd=REPO, check=True
    )
    wheels = sorted(dist.glob("corral-*.whl"))
    assert len(wheels) == 1 and sorted(dist.glob("corral-*.tar.gz")), sorted(dist.iterdir())
    home = tmp_path_factory.mktemp("pipx")
    env = os.environ | {
        "PIPX_HOME": str(home / "home"),
        "PIPX_BIN_DIR": str(home / "bin"),
        "PIPX_MAN_DIR": str(home / "man"),
    }
    subprocess.run([*_pipx(), "install", str(wheels[0])], env=env, check=True, timeout=800)
    return home / "bin" / "corral"


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    """An ordinary folder with nothing of the checkout in it."""
    return tmp_path


def _user_env() -> dict[str, str]:
    """The caller's environment minus this checkout's venv and any real model key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CORRAL_"))}
    env.pop("VIRTUAL_ENV", None)
    env["PYTHONPATH"] = ""
    return env


def test_help(corral: Path, cwd: Path) -> None:
    done = subprocess.run(
        [str(corral), "--help"], cwd=cwd, env=_user_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "demo" in done.stdout


@pytest.fixture
def served(corral: Path, cwd: Path) -> Iterator[str]:
    """`corral serve --port N` from `cwd`, as the README runs it; yields its base URL."""
    port = free_port()
    log = (cwd / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(corral), "serve", "--port", str(port)],
        cwd=cwd,
        env=_user_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, (cwd / "serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "server did not become healthy"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_serve_answers_health_and_the_console(served: str) -> None:
    assert httpx.get(f"{served}/health").status_code == 200
    page = httpx.get(f"{served}/console", follow_redirects=True)
    assert page.status_code == 200 and "<title>Corral console</title>" in page.text
    script = httpx.get(f"{served}/console/js/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]


def test_demo_plays_from_the_installed_wheel(corral: Path, cwd: Path) -> None:
    done = subprocess.run(
        [str(corral), "demo"],
        cwd=cwd,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "solved" in done.stdout
    assert (cwd / "corral-demo-outputs" / "server.log").stat().st_size > 0
