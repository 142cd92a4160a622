"""Metrics, traces and logs of a real server (SQLite and PostgreSQL) around one turn with a
built-in tool call: counters move by what the turn did, spans reach an OTLP receiver as one
trace, stderr is JSON lines with a request line and a turn line and no secret."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.fakes.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.server import API_KEY, ServerProcess, backend_env

MODEL = "claude-sonnet-4-5"
CANARY = "canary-vault-secret-5f1e2d"
MCP = "https://mcp.example.com/mcp"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(server: ServerProcess) -> Samples:
    """Every sample of GET /metrics, keyed by (name, sorted labels)."""
    reply = httpx.get(f"{server.url}/metrics", headers={"x-api-key": API_KEY}, timeout=10)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(reply.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@dataclass
class Observed:
    server: ServerProcess
    receiver: OtlpReceiver
    session_id: str
    before: Samples
    after: Samples
    during_stream: Samples


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModelServer,
    backend: str,
    receiver: OtlpReceiver,
) -> Iterator[ServerProcess]:
    tracing = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "corral-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # milliseconds between export batches
        "CORRAL_LOG_LEVEL": "INFO",
    }
    with backend_env(backend) as env:
        proc = ServerProcess(
            tmp_path_factory.mktemp("corral"), model_url=fake_model.url, env={**env, **tracing}
        ).start()
        yield proc
        proc.stop()


@pytest.fixture(scope="module")
def observed(
    server: ServerProcess, fake_model: FakeModelServer, receiver: OtlpReceiver
) -> Observed:
    """One turn: the model runs `bash`, then answers; scrapes before, during a stream, after."""
    client = server.client()
    before = scrape(server)
    vault = client.beta.vaults.create(display_name="v")
    client.beta.vaults.credentials.create(
        vault.id, auth={"type": "static_bearer", "mcp_server_url": MCP, "token": CANARY}
    )
    agent = client.beta.agents.create(
        model=MODEL, name="o", tools=[{"type": "agent_toolset_20260401"}]
    )
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session_id = client.beta.sessions.create(
        agent=agent.id, environment_id=env.id, vault_ids=[vault.id]
    ).id
    fake_model.reset([Turn([ToolUse("bash", {"command": "echo hi"})]), Turn([Text("done")])])
    with client.beta.sessions.events.stream(session_id):
        during = scrape(server)
        say(client, session_id, "run it")
        wait_idle(client, session_id, stop="end_turn")
    results = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
    assert [r.is_error for r in results] == [False]
    return Observed(server, receiver, session_id, before, scrape(server), during)


def delta(o: Observed, name: str, **labels: str) -> float:
    return value(o.after, name, **labels) - value(o.before, name, **labels)


def test_counters_move_by_what_the_turn_did(observed: Observed) -> None:
    assert delta(observed, "corral_sessions_created_total") == 1
    assert delta(observed, "corral_turns_total", stop_reason="end_turn") == 1
    assert delta(observed, "corral_turn_duration_seconds_count") == 1
    assert delta(observed, "corral_model_requests_total", model=MODEL, outcome="ok") == 2
    assert delta(observed, "corral_model_request_duration_seconds_count", model=MODEL) == 2
    # the fake model reports 10 input and 5 output tokens per request
    assert delta(observed, "corral_model_tokens_total", model=MODEL, kind="input") == 20
    assert delta(observed, "corral_model_tokens_total", model=MODEL, kind="output") == 10
    assert delta(observed, "corral_tool_calls_total", tool="bash", outcome="ok") == 1
    assert delta(observed, "corral_sandbox_provisions_total", outcome="ok") == 1
    assert delta(observed, "corral_sandbox_provision_duration_seconds_count") == 1
    assert delta(observed, "corral_append_duration_seconds_count", writer="api") >= 1
    assert delta(observed, "corral_append_duration_seconds_count", writer="brain") >= 3
    assert value(observed.during_stream, "corral_sse_clients") >= 1
    assert value(observed.after, "corral_sessions", status="idle") >= 1
    for state in ("pending", "leased", "expired"):
        assert ("corral_work_queue", (("state", state),)) in observed.after


def test_metrics_need_the_api_key(server: ServerProcess) -> None:
    reply = httpx.get(f"{server.url}/metrics", timeout=10)
    assert reply.status_code == 401
    assert reply.json()["error"]["type"] == "authentication_error"
    wrong = httpx.get(f"{server.url}/metrics", headers={"x-api-key": "nope"}, timeout=10)
    assert wrong.status_code == 401


def _turn_trace(o: Observed) -> list[ReceivedSpan]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        spans = o.receiver.snapshot()
        turns = [
            s
            for s in spans
            if s.name == "corral.turn" and s.attributes.get("corral.session_id") == o.session_id
        ]
        if turns and turns[0].attributes.get("corral.turn.closed"):
            return [s for s in spans if s.trace_id == turns[0].trace_id]
        time.sleep(0.1)
    raise AssertionError(f"no closed turn span in {[s.name for s in o.receiver.snapshot()]}")


def test_one_trace_per_turn_with_model_tool_and_sandbox_spans(observed: Observed) -> None:
    spans = _turn_trace(observed)
    by_name: dict[str, list[ReceivedSpan]] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    (turn,) = by_name["corral.turn"]
    assert turn.parent_span_id == ""  # the root of its own trace
    assert turn.service == "corral-under-test"
    assert turn.attributes["corral.stop_reason"] == "end_turn"
    models = by_name["corral.model_request"]
    assert len(models) == 2
    assert all(m.parent_span_id == turn.span_id for m in models)
    assert sum(m.attributes["gen_ai.usage.input_tokens"] for m in models) == 20
    assert {m.attributes["gen_ai.request.model"] for m in models} == {MODEL}
    (tool,) = by_name["corral.tool_call"]
    assert tool.parent_span_id == turn.span_id
    assert tool.attributes["corral.tool.name"] == "bash"
    (provision,) = by_name["corral.sandbox_provision"]
    assert provision.parent_span_id == tool.span_id
    ours = [s for s in spans if s.name.startswith("corral.")]
    assert {s.attributes.get("corral.session_id") for s in ours} == {observed.session_id}
    assert ours == spans  # no library adds spans of its own to a turn's trace


def _log_lines(path: Path) -> list[dict[str, Any]]:
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert lines
    return [json.loads(line) for line in lines]  # every line is one JSON object


def test_logs_are_json_lines_with_request_and_turn_lines_and_no_secret(
    observed: Observed,
) -> None:
    deadline = time.monotonic() + 10
    while True:  # the turn line is written right after the idle event the test saw
        records = _log_lines(observed.server.log_path)
        turns = [r for r in records if r.get("kind") == "turn"]
        if turns or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    requests = [r for r in records if r.get("kind") == "request"]
    sent = [
        r
        for r in requests
        if r["method"] == "POST" and r["path"] == f"/v1/sessions/{observed.session_id}/events"
    ]
    assert sent and sent[0]["status"] == 200
    assert sent[0]["request_id"].startswith("req_")
    assert isinstance(sent[0]["duration_ms"], float | int)
    (turn,) = [t for t in turns if t["session_id"] == observed.session_id]
    assert turn["stop_reason"] == "end_turn"
    assert (turn["input_tokens"], turn["output_tokens"], turn["model_requests"]) == (20, 10, 2)
    assert turn["duration_ms"] >= 0
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    assert not any(r["logger"].startswith(("httpx", "httpcore")) for r in records)
    text = observed.server.log_path.read_text()
    for secret in (API_KEY, CANARY, "sk-test-secret"):
        assert secret not in text


def test_every_response_has_a_request_id(server: ServerProcess) -> None:
    reply = httpx.get(f"{server.url}/health", timeout=10)
    assert reply.headers["request-id"].startswith("req_")
    client = server.client()
    raw = client.beta.agents.with_raw_response.list()
    assert raw.headers["request-id"].startswith("req_")


def test_metrics_open_when_the_operator_says_so(
    tmp_path: Path, fake_model: FakeModelServer
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "corral.toml").write_text("[metrics]\npublic = true\n")
    proc = ServerProcess(data, model_url=fake_model.url).start()
    try:
        reply = httpx.get(f"{proc.url}/metrics", timeout=10)
        assert reply.status_code == 200
        assert "corral_sessions_created_total" in reply.text
        # only /metrics opens: the API still needs its key
        assert httpx.get(f"{proc.url}/v1/agents", timeout=10).status_code == 401
    finally:
        proc.stop()
