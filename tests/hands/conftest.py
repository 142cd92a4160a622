"""Fixtures for the hands tests: LocalHands/ScriptedHands providers and a bwrap skip marker."""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from corral.hands.base import SandboxRecipe
from corral.hands.local import LocalHands
from corral.netpolicy import EgressSettings
from tests.registries import private_registry_hosts
from tests.uids import WORKER_UIDS

HAVE_BWRAP = shutil.which("bwrap") is not None
needs_bwrap = pytest.mark.skipif(
    not HAVE_BWRAP, reason="bubblewrap is not installed (Debian package `bubblewrap`)"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def local_hands(tmp_path: Path) -> AsyncIterator[LocalHands]:
    """A LocalHands whose state lives under tmp_path; closed (all sandboxes killed) after.

    The tests' stand-in for the internet listens on the loopback, which the operator opens
    (`allow_private`) to environments that list 127.0.0.1; `unrestricted` stays public-only.
    """
    egress = EgressSettings(allow_private=("127.0.0.1", *private_registry_hosts()))
    hands = LocalHands(tmp_path / "hands-state", uid_range=WORKER_UIDS, egress=egress)
    yield hands
    await hands.aclose()


def make_recipe(tmp_path: Path, name: str = "s1", **kwargs: object) -> SandboxRecipe:
    """A recipe with workspace/outputs under `tmp_path/name`."""
    base = tmp_path / name
    return SandboxRecipe(
        session_id=name, workspace=base / "workspace", outputs=base / "outputs", **kwargs
    )  # type: ignore[arg-type]


@functools.cache
def reachable(host: str, port: int = 443) -> bool:
    """Whether this machine can open a TCP connection to `host` (probed once per run)."""
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return False
    return True


def needs_registry(host: str) -> pytest.MarkDecorator:
    """Skip (with the reason) when a package registry cannot be reached from this machine."""
    return pytest.mark.skipif(
        not reachable(host), reason=f"{host}:443 is unreachable; this test installs real packages"
    )


@contextlib.contextmanager
def loopback_http(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """An HTTP server on the host's loopback, serving `handler` in a thread; yields its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
