"""What a user and an operator learn when the model call fails: the `session.error` message
names a missing key variable, and every failure is a warning in the server's log with the
session id, the provider's HTTP status and its error message (not only "turn closed:
retries_exhausted"). SDK -> Corral server subprocess -> wire-level fake model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.api.helpers import events, make_session, say, wait_idle
from tests.fakes.messages_server import ErrorReply, FakeModelServer
from tests.server import ServerProcess


def failures_logged(server: ServerProcess, session_id: str) -> list[dict[str, Any]]:
    """The server's JSON log lines about failed model calls of `session_id`."""
    lines = server.log_path.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    return [
        r for r in records if r.get("kind") == "model_error" and r.get("session_id") == session_id
    ]


def failed_turn(server: ServerProcess, model: str = "claude-sonnet-4-5") -> tuple[str, list[Any]]:
    """A turn that ends `retries_exhausted`; (session id, its `session.error` events)."""
    client = server.client()
    session_id, _ = make_session(client, tools=[], model=model)
    say(client, session_id, "hello")
    wait_idle(client, session_id, stop="retries_exhausted", timeout=60)
    return session_id, [e for e in events(client, session_id) if e.type == "session.error"]


def test_model_failures_are_warnings_with_status_and_the_providers_message(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset(
        [
            ErrorReply(status=500, type="api_error", message="upstream exploded"),
            ErrorReply(status=400, type="invalid_request_error", message="prompt is too long"),
        ]
    )
    session_id, errors = failed_turn(server)
    assert [e.error.retry_status.type for e in errors] == ["retrying", "exhausted"]
    assert "upstream exploded" in errors[0].error.message
    assert "prompt is too long" in errors[1].error.message
    logged = failures_logged(server, session_id)
    assert [(r["level"], r["status"], r["retry_status"]) for r in logged] == [
        ("warning", 500, "retrying"),
        ("warning", 400, "exhausted"),
    ]
    assert "upstream exploded" in logged[0]["msg"]
    assert "prompt is too long" in logged[1]["msg"]
    assert logged[1]["model"] == "claude-sonnet-4-5"


def test_a_missing_anthropic_api_key_is_named_to_the_user_and_in_the_log(
    tmp_path: Path, fake_model: FakeModelServer
) -> None:
    # The README's first snippet on a server started without a key.
    env = {"ANTHROPIC_API_KEY": ""}
    server = ServerProcess(tmp_path / "data", model_url=fake_model.url, env=env).start()
    try:
        session_id, errors = failed_turn(server)
        logged = failures_logged(server, session_id)
    finally:
        server.stop()
    assert len(errors) == 1
    message = errors[0].error.message
    assert message.startswith("ANTHROPIC_API_KEY is not set on the Corral server: ")
    assert "claude-sonnet-4-5" in message
    assert [(r["level"], r["status"], r["msg"]) for r in logged] == [
        ("warning", None, f"model call failed (exhausted): {message}")
    ]
