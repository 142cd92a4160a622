"""Shared fixtures: a fake model server and a real Corral server process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.messages_server import FakeModelServer, Text, Turn
from tests.server import ServerProcess, backend_env
from tests.uids import ENV_VALUE as WORKER_UID_RANGE

# Servers and workers the tests start inherit this: their sandboxes draw uids from this
# pytest worker's own slice (see tests/uids.py).
os.environ.setdefault("CORRAL_SANDBOX_UID_RANGE", WORKER_UID_RANGE)


@pytest.fixture(scope="module")
def fake_model() -> Iterator[FakeModelServer]:
    """A wire-level Messages API fake; tests set its script with `reset(...)`."""
    with FakeModelServer([Turn([Text("hello")])]) as fake:
        yield fake


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Which store the server under test uses (PostgreSQL when CI provides one)."""
    return str(request.param)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[ServerProcess]:
    """One Corral server per test module and backend, talking to `fake_model`."""
    with backend_env(backend) as env:
        proc = ServerProcess(
            tmp_path_factory.mktemp("corral"), model_url=fake_model.url, env=env
        ).start()
        yield proc
        proc.stop()


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio, like the server."""
    return "asyncio"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh data directory."""
    return tmp_path / "data"
