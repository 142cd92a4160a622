"""Self-hosted hands vs the cloud path, side by side in one run (real server subprocess, the
SDK's own `EnvironmentWorker` and `corral hands` as subprocesses, the wire-level fake model;
loopback only).

Usage: uv run python bench/worker.py [--rounds 20] [--leases 30]

(1) From just before `events.send` to the first tool execution, for a bash call the model
    makes at once: the command prints the wall clock (`date +%s.%N`) when it runs, on the
    SDK worker's host, or in a bubblewrap sandbox (cloud, and `corral hands`; both provisioned
    once before measuring). Same session shape, same fake model, rounds interleaved.
(2) Work-queue lease latency: poll (with an item waiting) -> ack -> first heartbeat, timed
    call by call with the SDK and an environment key.
Prints p50/p95; asserts no timings.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _util
import anthropic
from tests.api.helpers import say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.self_hosted.support import HandsProcess, WorkerProcess, create_key, self_hosted_env
from tests.server import ServerProcess

CLOCK = "date +%s.%N"


def answer(request: dict[str, Any]) -> Turn:
    """bash at once for a new message; 'done' once the tool's result is back."""
    last = request["messages"][-1]
    content = last.get("content")
    answered = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
    return Turn([Text("done")]) if answered else Turn([ToolUse("bash", {"command": CLOCK})])


def session_on(client: anthropic.Anthropic, env_id: str) -> str:
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="bench",
        tools=[{"type": "agent_toolset_20260401"}],  # type: ignore[list-item]
    )
    return client.beta.sessions.create(agent=agent.id, environment_id=env_id).id


def one_round(client: anthropic.Anthropic, session_id: str) -> float:
    """Seconds from before the send to the moment the bash command ran."""
    before = len(list(client.beta.sessions.events.list(session_id, limit=1000)))
    sent = time.time()
    say(client, session_id, "go")
    wait_idle(client, session_id, stop="end_turn", after=before + 1, timeout=120)
    log = list(client.beta.sessions.events.list(session_id, limit=1000))[before:]
    result = next(e for e in log if e.type in ("agent.tool_result", "user.tool_result"))
    text = "".join(getattr(b, "text", "") for b in result.content or [])
    return float(text.strip().split()[0]) - sent


def lease_latencies(
    server: ServerProcess, client: anthropic.Anthropic, n: int
) -> dict[str, list[float]]:
    """poll, ack and first heartbeat of `n` items, each timed."""
    env_id = self_hosted_env(client)
    key = create_key(server, env_id)
    worker = anthropic.Anthropic(base_url=server.url, api_key=None, auth_token=key, max_retries=0)
    work = worker.beta.environments.work
    out: dict[str, list[float]] = {"poll": [], "ack": [], "heartbeat": [], "total": []}
    for _ in range(n):
        session_on(client, env_id)  # queues an item
        t0 = time.perf_counter()
        item = work.poll(env_id, block_ms=999, anthropic_worker_id="bench-worker")
        t1 = time.perf_counter()
        assert item is not None
        work.ack(item.id, environment_id=env_id)
        t2 = time.perf_counter()
        work.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
        t3 = time.perf_counter()
        work.stop(item.id, environment_id=env_id, force=True)
        for name, value in (("poll", t1 - t0), ("ack", t2 - t1), ("heartbeat", t3 - t2)):
            out[name].append(value)
        out["total"].append(t3 - t0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--leases", type=int, default=30)
    args = parser.parse_args()
    _util.stop_on_signals()
    folder = Path(tempfile.mkdtemp(prefix="corral-bench-worker-"))
    with FakeModelServer(answer) as fake:
        server = ServerProcess(folder / "server", model_url=fake.url).start()
        worker: WorkerProcess | None = None
        hands: HandsProcess | None = None
        try:
            client = server.client()
            cloud_env = client.beta.environments.create(name="cloud", config={"type": "cloud"})
            cloud = session_on(client, cloud_env.id)
            hosted_env = self_hosted_env(client)
            key = create_key(server, hosted_env)
            worker = WorkerProcess(server, hosted_env, key, folder / "hands", WORKER_MAX_IDLE="600")
            hosted = session_on(client, hosted_env)
            hands_env = self_hosted_env(client)
            hands_key = create_key(server, hands_env)
            hands = HandsProcess(
                server, hands_env, hands_key, folder / "corral-hands", max_idle=600
            )
            ours = session_on(client, hands_env)
            sessions = {"cloud": cloud, "SDK worker": hosted, "corral hands": ours}
            for session_id in sessions.values():  # warm: sandboxes provisioned, workers attached
                one_round(client, session_id)
            times: dict[str, list[float]] = {name: [] for name in sessions}
            for _ in range(args.rounds):
                for name, session_id in sessions.items():
                    times[name].append(one_round(client, session_id))
            leases = lease_latencies(server, client, args.leases)
        finally:
            for process in (worker, hands):
                if process is not None:
                    process.stop()
            server.stop()
    series = {f"send -> first tool execution, {k}": v for k, v in times.items()}
    series.update({f"lease: {k}": v for k, v in leases.items()})
    rows = [
        [name, len(v), _util.ms(_util.percentile(v, 50)), _util.ms(_util.percentile(v, 95))]
        for name, v in series.items()
    ]
    print(_util.table(["measure", "n", "p50", "p95"], rows))
    _util.remove_tempdir(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
