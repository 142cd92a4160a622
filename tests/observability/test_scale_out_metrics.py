"""Metrics of the scale-out deployment on PostgreSQL: `corral serve --workers 0` plus
`corral worker --metrics-port`. Each process serves its own counters (the API counts
sessions, the worker turns and tools); both read the same session and queue gauges from the
store; a worker that takes over a dead worker's session counts a lease takeover."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.observability.test_observability import Samples, value
from tests.server import (
    API_KEY,
    DATABASE_URL_ENV,
    ServerProcess,
    free_port,
    fresh_postgres,
)
from tests.server import (
    start_worker as launch_worker,
)

pytestmark = pytest.mark.postgres
LEASE = {"CORRAL_LEASE_SECONDS": "2"}


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_worker(data_dir: Path, database_url: str, model_url: str) -> Worker:
    port = free_port()
    proc = launch_worker(
        data_dir,
        database_url,
        model_url,
        env=LEASE,
        args=("--metrics-port", str(port)),
        log_name=f"worker-{port}.log",
    )
    worker = Worker(proc, port)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert proc.poll() is None, (data_dir / f"worker-{port}.log").read_text()[-3000:]
        try:
            httpx.get(f"{worker.url}/metrics", timeout=1)
            return worker
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError("worker did not serve /metrics")


def scrape_url(url: str) -> Samples:
    from prometheus_client.parser import text_string_to_metric_families

    reply = httpx.get(f"{url}/metrics", headers={"x-api-key": API_KEY}, timeout=10)
    assert reply.status_code == 200, reply.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(reply.text)
        for s in family.samples
    }


@pytest.fixture
def cluster(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[tuple[ServerProcess, str]]:
    if not os.environ.get(DATABASE_URL_ENV):
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    with fresh_postgres("corral_metrics") as url:
        api = ServerProcess(
            tmp_path / "data",
            model_url=fake_model.url,
            env=LEASE,
            args=("--database-url", url, "--workers", "0"),
        ).start()
        try:
            yield api, url
        finally:
            api.stop()


def new_session(api: ServerProcess) -> str:
    client = api.client()
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5", name="w", tools=[{"type": "agent_toolset_20260401"}]
    )
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def test_each_process_serves_its_own_counters_and_the_same_gauges(
    cluster: tuple[ServerProcess, str], fake_model: FakeModelServer
) -> None:
    api, url = cluster
    worker = start_worker(api.data_dir, url, fake_model.url)
    try:
        assert httpx.get(f"{worker.url}/metrics", timeout=10).status_code == 401
        api_before, worker_before = scrape_url(api.url), scrape_url(worker.url)
        fake_model.reset([Turn([ToolUse("bash", {"command": "echo hi"})]), Turn([Text("ok")])])
        session_id = new_session(api)
        say(api.client(), session_id, "go")
        wait_idle(api.client(), session_id, stop="end_turn")
        api_after, worker_after = scrape_url(api.url), scrape_url(worker.url)
    finally:
        worker.stop()

    def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved(api_before, api_after, "corral_sessions_created_total") == 1
    assert moved(api_before, api_after, "corral_turns_total", stop_reason="end_turn") == 0
    assert moved(worker_before, worker_after, "corral_turns_total", stop_reason="end_turn") == 1
    assert moved(worker_before, worker_after, "corral_tool_calls_total", tool="bash", outcome="ok")
    assert value(api_after, "corral_sessions", status="idle") == 1
    assert value(worker_after, "corral_sessions", status="idle") == 1


def test_a_worker_taking_over_a_dead_workers_session_counts_it(
    cluster: tuple[ServerProcess, str], fake_model: FakeModelServer
) -> None:
    api, url = cluster
    fake_model.reset([Turn([Text("never " * 50)], chunk_delay=0.05), Turn([Text("second")])])
    first = start_worker(api.data_dir, url, fake_model.url)
    session_id = new_session(api)
    client = api.client()
    say(client, session_id, "slowly")
    deadline = time.monotonic() + 30
    while not any(e.type == "span.model_request_start" for e in events(client, session_id)):
        assert time.monotonic() < deadline, "the first worker never called the model"
        time.sleep(0.05)
    first.kill()  # its lease stays on the session until it expires
    second = start_worker(api.data_dir, url, fake_model.url)
    try:
        wait_idle(client, session_id, stop="end_turn", timeout=60)
        assert value(scrape_url(second.url), "corral_lease_takeovers_total") == 1
    finally:
        second.stop()
