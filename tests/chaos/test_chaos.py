"""Scale-out under chaos: the small CI run of `bench/chaos.py` must pass, the same run with
fencing off must be caught by its checker, and an SSE client on API process A must see what a
worker in process B appends. Skipped unless `CORRAL_TEST_DATABASE_URL` is set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fakes.messages_server import FakeModelServer, Text, Turn
from tests.server import API_KEY, DATABASE_URL_ENV, ServerProcess, fresh_postgres

ROOT = Path(__file__).resolve().parents[2]
CHAOS = ROOT / "bench" / "chaos.py"
BASE_URL = os.environ.get(DATABASE_URL_ENV, "")
INTERLEAVING = {
    "two_brains_interleaved",
    "tool_answered_twice",
    "tool_executed_twice",
    "model_response_appended_twice",
    "one_lease_two_owners",
}

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(not BASE_URL, reason=f"{DATABASE_URL_ENV} is not set"),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]


def run_chaos(tmp_path: Path, *args: str, timeout: float = 240) -> tuple[int, dict[str, Any]]:
    """Run the chaos script on a fresh database of the CI server; (exit code, tally)."""
    tally = tmp_path / "tally.json"
    command = [sys.executable, str(CHAOS), "--admin-url", BASE_URL, "--json", str(tally), *args]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )
    print(done.stdout[-4000:], done.stderr[-4000:])
    assert tally.exists(), f"no tally written (exit {done.returncode})"
    return done.returncode, json.loads(tally.read_text())


@pytest.mark.timeout(300)
def test_small_chaos_run_passes(tmp_path: Path) -> None:
    code, tally = run_chaos(tmp_path, "--sessions", "20", "--kills", "15", "--pauses", "1")
    assert tally["violations"] == {}
    assert code == 0
    assert tally["kills"] == 15 and tally["restarts"] == 15
    assert tally["turns"] >= 20 and tally["bash_executions"] > 0 and tally["custom_uses"] > 0


@pytest.mark.timeout(300)
def test_checker_catches_two_brains_when_fencing_is_off(tmp_path: Path) -> None:
    code, tally = run_chaos(
        tmp_path,
        "--no-fencing",
        "--sessions",
        "40",
        "--kills",
        "6",
        "--pauses",
        "10",
        "--lease",
        "4",
        # Two brains on one session may leave it without an end (a broken log is what this
        # run provokes); the default 180 s wait for such a session would outlast the timeout.
        "--deadline",
        "60",
    )
    assert code == 1
    assert INTERLEAVING & set(tally["violations"]), tally["violations"]


@pytest.fixture
def database_url() -> Iterator[str]:
    with fresh_postgres("corral_sse") as url:
        yield url


@pytest.mark.timeout(120)
def test_sse_on_api_process_sees_appends_of_worker_process(
    tmp_path: Path, database_url: str
) -> None:
    data = tmp_path / "data"
    with FakeModelServer([Turn([Text("appended by the worker")], first_token_delay=0.3)]) as fake:
        api = ServerProcess(
            data, model_url=fake.url, args=("--database-url", database_url, "--workers", "0")
        ).start()
        env = {
            **os.environ,
            "CORRAL_API_KEYS": API_KEY,
            "ANTHROPIC_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": fake.url,
            "CORRAL_CONFIG": os.devnull,  # no config file
        }
        with (data / "worker.log").open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "corral", "worker", "--database-url", database_url,
                 "--data-dir", str(data)], env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            seen = _stream_one_turn(api)
        finally:
            worker.terminate()
            worker.wait(timeout=20)
            api.stop()
    assert [t for t, _ in seen if t == "agent.message"] == ["agent.message"]
    assert seen[-1] == ("session.status_idle", "end_turn")
    with psycopg.connect(database_url) as conn:
        owners = {
            str(row[0])
            for row in conn.execute(
                "SELECT writer_owner FROM events WHERE type = 'agent.message'"
            ).fetchall()
        }
    assert [o.split(":")[1] for o in owners] == [str(worker.pid)]


def _stream_one_turn(api: ServerProcess) -> list[tuple[str, str | None]]:
    """One turn with the SDK stream on `api`; (type, stop reason) of each event seen."""
    client = api.client()
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="t", tools=[])
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    seen: list[tuple[str, str | None]] = []
    with client.beta.sessions.events.stream(session.id) as stream:
        client.beta.sessions.events.send(
            session.id,
            events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}],
        )
        for event in stream:
            stop = getattr(getattr(event, "stop_reason", None), "type", None)
            seen.append((event.type, stop))
            if event.type == "session.status_idle" and stop != "requires_action":
                break
    return seen
