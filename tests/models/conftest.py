from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.messages_server import FakeModelServer, ScriptedTurns


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeModelServer]:
    with FakeModelServer(ScriptedTurns([])) as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeModelServer) -> FakeModelServer:
    """The shared fake, emptied; tests set `fake.handler` to their script."""
    fake_server.reset(ScriptedTurns([]))
    return fake_server
