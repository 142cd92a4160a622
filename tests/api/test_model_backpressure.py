"""Model back-pressure: a provider's `retry-after` (and rate-limit reset headers) is waited
for, within `model_retry_max_seconds`, and a model that goes silent is given up after
`model_stall_timeout_seconds`, said in a retrying `session.error` and retried.

SDK -> Corral server subprocess (default retry bound, a 2 s stall timeout) -> wire-level fake
model, which records when each request arrived."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.api.test_model_errors import failures_logged
from tests.fakes.messages_server import ErrorReply, FakeModelServer, ScriptedTurns, Text, Turn
from tests.server import ServerProcess

STALL = 2


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModelServer]:
    with FakeModelServer([Turn([Text("hello")])]) as server:
        yield server


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModelServer
) -> Iterator[ServerProcess]:
    routes = [{"match": "local-*", "provider": "openai", "base_url": fake.openai_url}]
    env = {
        "CORRAL_MODEL_STALL_TIMEOUT_SECONDS": str(STALL),
        "CORRAL_MODEL_ROUTES": json.dumps(routes),
    }
    proc = ServerProcess(tmp_path_factory.mktemp("corral"), model_url=fake.url, env=env).start()
    yield proc
    proc.stop()


def turn(server: ServerProcess, stop: str, model: str = "claude-sonnet-4-5") -> tuple[str, float]:
    """Run one turn to idle(`stop`); (session id, seconds it took)."""
    client = server.client()
    session_id, _ = make_session(client, tools=[], model=model)
    started = time.monotonic()
    say(client, session_id, "hello")
    wait_idle(client, session_id, stop=stop, timeout=90)
    return session_id, time.monotonic() - started


def errors_of(server: ServerProcess, session_id: str) -> list[Any]:
    return [e.error for e in events(server.client(), session_id) if e.type == "session.error"]


def gaps(fake: FakeModelServer) -> list[float]:
    """Seconds between consecutive requests the fake received."""
    times = [r.at for r in fake.recorded]
    return [b - a for a, b in zip(times, times[1:], strict=False)]


@pytest.mark.parametrize(
    ("model", "headers"),
    [
        ("claude-sonnet-4-5", {"retry-after": "2"}),
        ("local-fake", {"retry-after": "2"}),
        ("local-fake", {"x-ratelimit-reset-requests": "2s", "x-ratelimit-remaining-requests": "0"}),
    ],
)
def test_a_429_is_retried_after_the_wait_the_provider_asked_for(
    server: ServerProcess, fake: FakeModelServer, model: str, headers: dict[str, str]
) -> None:
    fake.reset([ErrorReply(status=429, headers=headers), Turn([Text("done")])])
    session_id, _ = turn(server, "end_turn", model)
    assert len(fake.recorded) == 2
    assert gaps(fake)[0] >= 2.0  # not the 0.5 s of the first backoff step
    errors = errors_of(server, session_id)
    assert [(e.type, e.retry_status.type) for e in errors] == [
        ("model_rate_limited_error", "retrying")
    ]


def test_a_wait_beyond_the_retry_bound_gives_up_at_once_saying_so(
    server: ServerProcess, fake: FakeModelServer
) -> None:
    fake.reset(
        ScriptedTurns([ErrorReply(status=429, headers={"retry-after": "600"})], repeat_last=True)
    )
    session_id, seconds = turn(server, "retries_exhausted")
    assert seconds < 10  # neither slept for 600 s nor retried early
    assert len(fake.recorded) == 1
    [error] = errors_of(server, session_id)
    assert error.type == "model_rate_limited_error"  # the retryable class: try again later
    assert error.retry_status.type == "exhausted"
    assert "the provider asked to wait 600 s" in error.message
    assert "model_retry_max_seconds" in error.message


def test_a_silent_model_is_given_up_after_the_stall_timeout_and_retried(
    server: ServerProcess, fake: FakeModelServer
) -> None:
    # The first answer starts streaming, then sends nothing for far longer than the timeout.
    fake.reset([Turn([Text("late")], first_token_delay=60), Turn([Text("done")])])
    session_id, seconds = turn(server, "end_turn")
    assert len(fake.recorded) == 2
    assert STALL <= gaps(fake)[0] < STALL + 5
    [error] = errors_of(server, session_id)
    assert error.retry_status.type == "retrying"
    assert f"the model sent nothing for {STALL} s" in error.message
    [logged] = failures_logged(server, session_id)
    assert logged["level"] == "warning"
    assert f"the model sent nothing for {STALL} s" in logged["msg"]
    assert seconds < 20


def test_a_model_that_stays_silent_is_retried_then_given_up(
    server: ServerProcess, fake: FakeModelServer
) -> None:
    fake.reset(ScriptedTurns([Turn([Text("never")], first_token_delay=60)], repeat_last=True))
    session_id, seconds = turn(server, "retries_exhausted", "local-fake")
    errors = errors_of(server, session_id)
    assert [e.retry_status.type for e in errors] == ["retrying"] * 4 + ["exhausted"]
    assert all(f"the model sent nothing for {STALL} s" in e.message for e in errors)
    assert all(STALL <= gap < STALL + 10 for gap in gaps(fake))
    assert seconds < 5 * STALL + 30


def test_the_time_bound_from_corral_toml_ends_the_retries_before_the_count_does(
    tmp_path: Path, fake: FakeModelServer
) -> None:
    # From the file, as an operator sets them: a 2 s stall, retries for at most 2.5 s. The
    # second stall ends 2.5 s or more after the first, and any wait goes beyond the bound.
    (tmp_path / "corral.toml").write_text(
        "[server]\nmodel_stall_timeout_seconds = 2\nmodel_retry_max_seconds = 2.5\n"
    )
    fake.reset(ScriptedTurns([Turn([Text("never")], first_token_delay=60)], repeat_last=True))
    proc = ServerProcess(tmp_path, model_url=fake.url).start()
    try:
        session_id, _ = turn(proc, "retries_exhausted")
        errors = errors_of(proc, session_id)
    finally:
        proc.stop()
    assert [e.retry_status.type for e in errors] == ["retrying", "exhausted"]
    assert "the model sent nothing for 2 s" in errors[1].message
    assert "s of retries, the 2.5 s retry bound (model_retry_max_seconds)" in errors[1].message
    assert len(fake.recorded) == 2
