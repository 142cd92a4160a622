"""Context compaction through the official SDK against a real server (SQLite and PostgreSQL)
and the wire-level fake model: a session driven far past a 4,000-token window keeps working
across several compactions, every request the model receives fits the window, and the log
keeps every original event (docs/context.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.api.helpers import LOOKUP, events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Reply, Text, ToolUse, Turn, Usage
from tests.server import ServerProcess, backend_env

WINDOW = 4000
TOML = f"""
[[models.routes]]
match = "small-*"
provider = "anthropic"
context_window = {WINDOW}
compaction_model = "summariser-1"

[[models.routes]]
match = "summariser-*"
provider = "anthropic"

[[models.routes]]
match = "cramped-*"
provider = "anthropic"
context_window = 1024
"""
SUMMARISER = "You compact the conversation"


def tokens(body: dict[str, Any]) -> int:
    """The fake's own count of a request (four bytes a token: not Corral's estimate, so the
    server must learn the difference from the usage it is sent)."""
    sent = [body.get("system"), body.get("tools"), body.get("messages")]
    return len(json.dumps(sent).encode()) // 4


class Model:
    """Answers agent requests (a lookup call for every "lookup" message, then text) and
    summary requests; reports usage as counted by `tokens`."""

    def __init__(self) -> None:
        self.summaries = 0
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        usage = Usage(input_tokens=tokens(body), output_tokens=20)
        if SUMMARISER in json.dumps(body.get("system")):
            with self.lock:
                self.summaries += 1
                number = self.summaries
            return Turn([Text(f"SUMMARY-{number}: the user asked for lookups.")], usage=usage)
        last = body["messages"][-1]["content"]
        asked = [
            b for b in last if b.get("type") == "text" and "please lookup" in b.get("text", "")
        ]
        if asked and not any(b.get("type") == "tool_result" for b in last):
            return Turn([ToolUse("lookup", {"key": "k"})], usage=usage)
        return Turn([Text("noted " + "n" * 200)], usage=usage)


def is_summary(body: dict[str, Any]) -> bool:
    return SUMMARISER in json.dumps(body.get("system"))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("corral")
    (data / "corral.toml").write_text(TOML)
    with backend_env(backend) as env:
        proc = ServerProcess(data, model_url=fake_model.url, env=env).start()
        yield proc
        proc.stop()


def session_on(client: anthropic.Anthropic, model: str, system: str = "You help.") -> str:
    agent = client.beta.agents.create(model=model, name="c", system=system, tools=[LOOKUP])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def answer_lookups(client: anthropic.Anthropic, session_id: str, after: int, result: str) -> Any:
    """Answer every custom tool call until the turn ends; returns the final idle event."""
    while True:
        idle = wait_idle(client, session_id, after=after)
        if idle.stop_reason.type != "requires_action":
            return idle
        after = len(events(client, session_id))
        client.beta.sessions.events.send(
            session_id,
            events=[
                {
                    "type": "user.custom_tool_result",
                    "custom_tool_use_id": event_id,
                    "content": [{"type": "text", "text": result}],
                }
                for event_id in idle.stop_reason.event_ids
            ],
        )


def test_a_long_session_keeps_working_across_compactions(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    model = Model()
    fake_model.reset(model)
    session_id = session_on(client, "small-model")
    sent: list[str] = []
    results: list[str] = []
    for index in range(12):
        text = f"message {index}: please lookup " + "m" * 900
        result = f"result {index} " + "r" * 1200
        sent.append(text)
        results.append(result)
        after = len(events(client, session_id))
        say(client, session_id, text)
        idle = answer_lookups(client, session_id, after, result)
        assert idle.stop_reason.type == "end_turn", idle

    requests = fake_model.requests
    agent_requests = [r for r in requests if not is_summary(r)]
    summary_requests = [r for r in requests if is_summary(r)]
    assert len(summary_requests) >= 3, "several compactions"
    assert all(tokens(r) < WINDOW for r in requests), [tokens(r) for r in requests]
    assert all(r["model"] == "summariser-1" for r in summary_requests)
    # after the last compaction the model sees its summary first, then the newest turns
    first = agent_requests[-1]["messages"][0]["content"][0]
    assert first["text"].startswith("<context-summary>")
    assert f"SUMMARY-{model.summaries}" in first["text"]
    assert sent[-1] in json.dumps(agent_requests[-1]["messages"])
    assert sent[0] not in json.dumps(agent_requests[-1]["messages"])

    log = events(client, session_id)
    compactions = [e for e in log if e.type == "agent.thread_context_compacted"]
    assert len(compactions) == len(summary_requests)
    assert type(compactions[0]).__name__ == "BetaManagedAgentsAgentThreadContextCompactedEvent"
    assert not any(e.type.startswith("corral.") for e in log)
    # every original event stays readable: each message and each full tool result
    said = [e.content[0].text for e in log if e.type == "user.message"]
    answered = [e.content[0].text for e in log if e.type == "user.custom_tool_result"]
    assert (said, answered) == (sent, results)
    assert sum(e.type == "agent.custom_tool_use" for e in log) == 12
    # the summaries' tokens count in the session's usage
    usage = client.beta.sessions.retrieve(session_id).usage
    assert usage.input_tokens == sum(tokens(r) for r in requests)


def test_a_tool_result_larger_than_the_window_is_truncated_in_the_request_only(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset(Model())
    session_id = session_on(client, "small-model")
    huge = "line of output\n" * 4000  # 60 KB, about 15,000 tokens
    say(client, session_id, "please lookup once")
    idle = answer_lookups(client, session_id, 0, huge)
    assert idle.stop_reason.type == "end_turn"
    last = fake_model.requests[-1]
    assert tokens(last) < WINDOW
    (result,) = [
        b for m in last["messages"] for b in m["content"] if b.get("type") == "tool_result"
    ]
    assert "truncated this tool result" in result["content"][-1]["text"]
    assert result["content"][0]["text"].startswith("line of output")
    logged = [e for e in events(client, session_id) if e.type == "user.custom_tool_result"]
    assert logged[0].content[0].text == huge


def test_a_message_larger_than_the_window_is_summarised_whole(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset(Model())
    session_id = session_on(client, "cramped-model")
    huge = "word " * 1200  # 6 KB, about 2,000 tokens: the window is 1,024
    say(client, session_id, huge)
    idle = wait_idle(client, session_id)
    assert idle.stop_reason.type == "end_turn"
    summary, answer = fake_model.requests
    assert is_summary(summary) and not is_summary(answer)
    assert all(tokens(r) < 1024 for r in fake_model.requests)
    assert "characters omitted to fit the context window" in json.dumps(summary)
    assert answer["messages"][0]["content"][0]["text"].startswith("<context-summary>")
    said = [e for e in events(client, session_id) if e.type == "user.message"]
    assert said[0].content[0].text == huge


def test_a_turn_that_cannot_fit_ends_with_compaction_limit_reached(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset(Model())
    # a system prompt of about 1,000 tokens: over the threshold (819) whatever is compacted
    session_id = session_on(client, "cramped-model", system="Be thorough. " * 250)
    say(client, session_id, "hello")
    idle = wait_idle(client, session_id)
    assert idle.stop_reason.type == "retries_exhausted"
    log = events(client, session_id)
    (error,) = [e for e in log if e.type == "session.error"]
    assert error.error.type == "compaction_limit_reached_error"
    assert type(error.error).__name__ == "BetaManagedAgentsCompactionLimitReachedErrorObject"
    assert error.error.retry_status.type == "exhausted"
    assert all(is_summary(r) for r in fake_model.requests)  # no request that could not fit
    assert [e.type for e in log].count("agent.thread_context_compacted") >= 1


class SlowFirstSummary(Model):
    """The first summary request hangs (the server is killed meanwhile); later ones answer."""

    def __call__(self, body: dict[str, Any]) -> Reply:
        reply = super().__call__(body)
        if is_summary(body) and self.summaries == 1 and isinstance(reply, Turn):
            return Turn(reply.blocks, usage=reply.usage, first_token_delay=60)
        return reply


@pytest.fixture
def crashy(tmp_path: Path, fake_model: FakeModelServer, backend: str) -> Iterator[ServerProcess]:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "corral.toml").write_text(TOML)
    with backend_env(backend) as env:
        lease = {"CORRAL_LEASE_SECONDS": "2"}  # a restart on PostgreSQL waits the lease out
        proc = ServerProcess(tmp_path / "data", model_url=fake_model.url, env={**env, **lease})
        proc.start()
        yield proc
        proc.stop()


def test_a_kill_during_the_summary_request_loses_and_duplicates_nothing(
    crashy: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset(SlowFirstSummary())
    client = crashy.client()
    session_id = session_on(client, "small-model")
    for index in range(20):
        after = len(events(client, session_id))
        say(client, session_id, f"message {index} " + "m" * 1500)
        deadline = time.monotonic() + 30
        while not any(is_summary(r) for r in fake_model.requests):
            log = events(client, session_id)
            if any(e.type == "session.status_idle" for e in log[after:]):
                break
            assert time.monotonic() < deadline, "the turn did not end"
            time.sleep(0.05)
        if any(is_summary(r) for r in fake_model.requests):
            break
    else:
        raise AssertionError("no compaction")
    crashy.restart()  # kill -9 while the summary is being written
    client = crashy.client()
    idle = wait_idle(client, session_id, after=after, timeout=60)
    assert idle.stop_reason.type == "end_turn"
    log = events(client, session_id)
    assert [e.type for e in log].count("agent.thread_context_compacted") == 1
    summaries = [r for r in fake_model.requests if is_summary(r)]
    assert len(summaries) == 2  # the lost one, then the one logged
    last = [r for r in fake_model.requests if not is_summary(r)][-1]
    assert last["messages"][0]["content"][0]["text"].count("<context-summary>") == 1
    assert "SUMMARY-2" in last["messages"][0]["content"][0]["text"]
    assert all(tokens(r) < WINDOW for r in fake_model.requests)
    said = [e.content[0].text for e in log if e.type == "user.message"]
    assert len(said) == index + 1
