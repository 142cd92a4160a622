"""A brain that stops mid-turn without finishing (graceful shutdown, lease lost while stalled)
must leave the session claimable: after a restart the turn completes. Embedded SQLite, so it
runs everywhere; the chaos run covers the same path on PostgreSQL.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, Turn
from tests.server import ServerProcess


@pytest.mark.slow
def test_graceful_stop_mid_turn_then_restart_finishes_the_turn(tmp_path: Path) -> None:
    slow = Turn([Text("never sent")], first_token_delay=5.0)
    with FakeModelServer([slow, Turn([Text("after the restart")])]) as fake:
        server = ServerProcess(tmp_path / "data", model_url=fake.url).start()
        try:
            client = server.client()
            session_id, _ = make_session(client, tools=[])
            say(client, session_id, "hello")
            deadline = time.monotonic() + 20
            while not any(e.type == "span.model_request_start" for e in events(client, session_id)):
                assert time.monotonic() < deadline, "the brain never started"
                time.sleep(0.05)
            server.stop()  # SIGTERM while the model call is in flight
            server.start()
            idle = wait_idle(server.client(), session_id, stop="end_turn", timeout=20)
        finally:
            server.stop()
    assert idle.stop_reason.type == "end_turn"
