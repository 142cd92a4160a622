"""Fixtures shared by the bad-input tests."""

from __future__ import annotations

import anthropic
import pytest

from tests.api.bad_input_support import Ids, make_ids
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.server import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> anthropic.Anthropic:
    """The SDK against the module's server; a new connection per test, because the server
    drops the connection after a 500 and the next request on it would fail too."""
    return server.client()


@pytest.fixture(scope="module")
def ids(server: ServerProcess, fake_model: FakeModelServer) -> Ids:
    """The objects the cases refer to; the model always answers "hello"."""
    fake_model.reset(ScriptedTurns([Turn([Text("hello")])], repeat_last=True))
    return make_ids(server.client())
