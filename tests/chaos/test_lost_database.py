"""A lost database is said out loud: every request stops at `store_timeout_seconds` with a
503 (the SDK's retryable class), `/health` turns 503 on the server and on a worker, and a
request answered with an error was not applied, not even once the database is back.

PostgreSQL is lost through `BlackHoleProxy` (sockets open, nothing answers, bytes delivered
late on healing); SQLite through another process holding the write lock.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anthropic
import httpx
import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.blackhole import BlackHoleProxy
from tests.fakes.messages_server import FakeModelServer, Text, Turn
from tests.server import (
    DATABASE_URL_ENV,
    ServerProcess,
    free_port,
    fresh_postgres,
    start_worker,
    stop_worker,
)

BOUND = 2.0
SLACK = 1.0


def _answer_503(call: Callable[[], Any]) -> anthropic.APIStatusError:
    """Run `call`; it must fail with a 503 within the bound plus a second."""
    started = time.monotonic()
    with pytest.raises(anthropic.APIStatusError) as caught:
        call()
    took = time.monotonic() - started
    assert took <= BOUND + SLACK, f"answered after {took:.1f} s"
    assert caught.value.status_code == 503, caught.value
    return caught.value


def _health(url: str) -> httpx.Response:
    started = time.monotonic()
    reply = httpx.get(f"{url}/health", timeout=30)
    assert time.monotonic() - started <= BOUND + SLACK
    return reply


def _wait_ready(url: str, timeout: float = 60.0) -> None:
    """Until `url`/health is 200 (a worker may still be starting: refused until it binds)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=30).status_code == 200:
                return
        except httpx.ConnectError:
            pass
        assert time.monotonic() < deadline, f"{url} never became ready"
        time.sleep(0.2)


@pytest.fixture
def proxied_postgres() -> Iterator[tuple[str, BlackHoleProxy]]:
    """A fresh database and its URL through a black-hole proxy."""
    if not os.environ.get(DATABASE_URL_ENV):
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    with fresh_postgres("corral_blackhole") as url:
        parts = urlsplit(url)
        with BlackHoleProxy((parts.hostname or "127.0.0.1", parts.port or 5432)) as proxy:
            netloc = f"{parts.username}@127.0.0.1:{proxy.port}"
            yield urlunsplit(parts._replace(netloc=netloc)), proxy


@pytest.mark.postgres
@pytest.mark.slow
def test_black_holed_postgres_answers_503_in_bound_and_applies_nothing(
    tmp_path: Path, fake_model: FakeModelServer, proxied_postgres: tuple[str, BlackHoleProxy]
) -> None:
    url, proxy = proxied_postgres
    env = {"CORRAL_DATABASE_URL": url, "CORRAL_STORE_TIMEOUT_SECONDS": str(BOUND)}
    data = tmp_path / "data"
    server = ServerProcess(data, model_url=fake_model.url, env=env).start()
    metrics_port = free_port()
    worker = start_worker(
        data,
        url,
        fake_model.url,
        env={"CORRAL_STORE_TIMEOUT_SECONDS": str(BOUND)},
        args=("--metrics-port", str(metrics_port)),
    )
    worker_url = f"http://127.0.0.1:{metrics_port}"
    try:
        client = server.client(timeout=30)
        session_id, agent_id = make_session(client, tools=[])
        say(client, session_id, "before")
        wait_idle(client, session_id, stop="end_turn")
        _wait_ready(worker_url)
        env_id = client.beta.sessions.retrieve(session_id).environment_id

        proxy.black_hole()
        refused = [f"lost {n}" for n in range(3)]
        for text in refused:
            error = _answer_503(partial(say, client, session_id, text))
            assert error.response.headers["x-should-retry"] == "true", error.message
            assert "database" in error.message
        _answer_503(lambda: client.beta.sessions.list())
        _answer_503(lambda: client.beta.sessions.create(agent=agent_id, environment_id=env_id))
        time.sleep(1.1)  # past the health cache
        for where in (server.url, worker_url):
            reply = _health(where)
            assert reply.status_code == 503, reply.text
            assert reply.json()["store"]["status"] == "unavailable"
            assert httpx.get(f"{where}/health/live", timeout=5).status_code == 200

        proxy.heal()
        _wait_ready(server.url)
        _wait_ready(worker_url)
        time.sleep(3 * BOUND)  # room for anything held in the network to land (it must not)
        texts = [
            block.text
            for e in events(client, session_id)
            if e.type == "user.message"
            for block in e.content
        ]
        assert texts == ["before"], texts
        assert [s.id for s in client.beta.sessions.list()] == [session_id]

        after = len(events(client, session_id))
        fake_model.reset([Turn([Text("back")])])
        say(client, session_id, "after")
        wait_idle(client, session_id, stop="end_turn", after=after)
    finally:
        stop_worker(worker)
        server.stop()


def test_sqlite_locked_by_another_process_answers_503_in_bound(
    tmp_path: Path, fake_model: FakeModelServer
) -> None:
    env = {"CORRAL_STORE_TIMEOUT_SECONDS": "1"}
    server = ServerProcess(tmp_path / "data", model_url=fake_model.url, env=env).start()
    try:
        client = server.client(timeout=60)
        holder = sqlite3.connect(tmp_path / "data" / "corral.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another process (a backup, a script) writes
        try:
            started = time.monotonic()
            with pytest.raises(anthropic.APIStatusError) as caught:
                client.beta.agents.create(model="claude-sonnet-4-5", name="locked out")
            assert time.monotonic() - started <= 1.0 + SLACK + 0.5
            assert caught.value.status_code == 503
            assert "locked" in caught.value.message
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert [a.name for a in client.beta.agents.list()] == []
        assert client.beta.agents.create(model="claude-sonnet-4-5", name="in").name == "in"
    finally:
        server.stop()
