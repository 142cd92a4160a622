"""Sessions and events through the official SDK, with the model faked at the wire."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import anthropic
import httpx
import pytest

from tests.api.helpers import LOOKUP, assert_log_sound, events, make_session, say, wait_idle
from tests.fakes.messages_server import ErrorReply, FakeModelServer, Text, ToolUse, Turn
from tests.server import API_KEY, ServerProcess


def test_text_turn_ends_with_end_turn_and_counts_usage(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset([Turn([Text("Hello there")])])
    client = server.client()
    session_id, _ = make_session(client)
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    types = [e.type for e in log]
    assert types == [
        "user.message",
        "session.status_running",
        "span.model_request_start",
        "agent.message",
        "span.model_request_end",
        "session.usage",
        "session.status_idle",
    ]
    assert log[3].content[0].text == "Hello there"
    session = client.beta.sessions.retrieve(session_id)
    assert session.status == "idle"
    assert session.usage.input_tokens == 10 and session.usage.output_tokens == 5
    request = fake_model.requests[-1]
    assert request["messages"][0]["content"][0]["text"] == "hi"
    assert "sk-test-secret" not in str(log)


def test_parallel_custom_tools_any_order(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset(
        [
            Turn(
                [
                    Text("Looking"),
                    ToolUse("lookup", {"key": "a"}),
                    ToolUse("lookup", {"key": "b"}),
                    ToolUse("lookup", {"key": "c"}),
                ]
            ),
            Turn([Text("Done: a b c")]),
        ]
    )
    client = server.client()
    session_id, _ = make_session(client)
    say(client, session_id, "look up three")
    idle = wait_idle(client, session_id, stop="requires_action")
    uses = [e for e in events(client, session_id) if e.type == "agent.custom_tool_use"]
    assert sorted(idle.stop_reason.event_ids) == sorted(u.id for u in uses)
    for count, use in enumerate(reversed(uses)):
        client.beta.sessions.events.send(
            session_id,
            events=[
                {
                    "type": "user.custom_tool_result",
                    "custom_tool_use_id": use.id,
                    "content": [{"type": "text", "text": f"value-{use.input['key']}"}],
                }
            ],
        )
        if count < 2:
            log = events(client, session_id)
            remaining = wait_idle(client, session_id, stop="requires_action", after=len(log) - 1)
            assert len(remaining.stop_reason.event_ids) == 2 - count
    wait_idle(client, session_id, stop="end_turn")
    results = fake_model.requests[-1]["messages"][-1]["content"]
    assert [r["type"] for r in results] == ["tool_result"] * 3
    assert_log_sound(events(client, session_id))


def test_answers_are_validated(server: ServerProcess, fake_model: FakeModelServer) -> None:
    fake_model.reset([Turn([ToolUse("lookup", {"key": "a"})]), Turn([Text("ok")])])
    client = server.client()
    session_id, _ = make_session(client)
    with pytest.raises(anthropic.BadRequestError):
        client.beta.sessions.events.send(
            session_id,
            events=[{"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nope"}],
        )
    say(client, session_id, "go")
    wait_idle(client, session_id, stop="requires_action")
    use = next(e for e in events(client, session_id) if e.type == "agent.custom_tool_use")
    answer = {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": use.id,
        "content": [{"type": "text", "text": "1"}],
    }
    client.beta.sessions.events.send(session_id, events=[answer])  # type: ignore[list-item]
    with pytest.raises(anthropic.ConflictError):
        client.beta.sessions.events.send(session_id, events=[answer])  # type: ignore[list-item]
    wait_idle(client, session_id, stop="end_turn")
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.events.send(
            session_id, events=[{"type": "user.message", "content": []}]
        )
    assert "content" in info.value.message
    with pytest.raises(anthropic.NotFoundError):
        say(client, "sesn_missing", "hi")


def test_session_pins_agent_version(server: ServerProcess, fake_model: FakeModelServer) -> None:
    fake_model.reset([Turn([Text("old")]), Turn([Text("new")])])
    client = server.client()
    session_id, agent_id = make_session(client, system="OLD PROMPT")
    client.beta.agents.update(agent_id, version=1, system="NEW PROMPT", tools=[])
    env_id = client.beta.sessions.retrieve(session_id).environment_id
    fresh = client.beta.sessions.create(agent=agent_id, environment_id=env_id)
    assert client.beta.sessions.retrieve(session_id).agent.version == 1
    assert fresh.agent.version == 2
    say(client, session_id, "first")
    wait_idle(client, session_id, stop="end_turn")
    assert fake_model.requests[-1]["system"][0]["text"] == "OLD PROMPT"
    assert [t["name"] for t in fake_model.requests[-1]["tools"]] == ["lookup"]
    say(client, fresh.id, "second")
    wait_idle(client, fresh.id, stop="end_turn")
    assert fake_model.requests[-1]["system"][0]["text"] == "NEW PROMPT"
    assert "tools" not in fake_model.requests[-1] or not fake_model.requests[-1]["tools"]
    pinned = client.beta.sessions.create(
        agent={"type": "agent", "id": agent_id, "version": 1}, environment_id=env_id
    )
    assert pinned.agent.system == "OLD PROMPT"


def test_stream_sees_the_whole_turn_in_order(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset([Turn([Text("streamed " * 20)], chunk_delay=0.001)])
    client = server.client()
    session_id, _ = make_session(client)
    seen: list[object] = []
    with client.beta.sessions.events.stream(session_id, event_deltas=["agent.message"]) as stream:
        say(client, session_id, "stream me")
        for event in stream:
            seen.append(event)
            if event.type == "session.status_idle":
                break
    stored = [e for e in seen if e.type not in ("event_start", "event_delta")]  # type: ignore[attr-defined]
    log = events(client, session_id)
    assert [e.id for e in stored] == [e.id for e in log]  # type: ignore[attr-defined]
    previews = [e for e in seen if e.type == "event_delta"]  # type: ignore[attr-defined]
    assert previews, "event_deltas previews were requested"
    message = next(e for e in log if e.type == "agent.message")
    assert {p.event_id for p in previews} == {message.id}  # type: ignore[attr-defined]
    assert "".join(p.delta.content.text for p in previews) == message.content[0].text  # type: ignore[attr-defined]


def test_overloaded_model_is_retried_then_succeeds(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset([ErrorReply(status=529), ErrorReply(status=429), Turn([Text("finally")])])
    client = server.client()
    session_id, _ = make_session(client)
    say(client, session_id, "retry")
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    errors = [e for e in log if e.type == "session.error"]
    assert [e.error.type for e in errors] == ["model_overloaded_error", "model_rate_limited_error"]
    assert all(e.error.retry_status.type == "retrying" for e in errors)
    assert sum(e.type == "session.status_rescheduled" for e in log) == 2


def test_non_retryable_model_error_exhausts(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset([ErrorReply(status=400, message="bad request")])
    client = server.client()
    session_id, _ = make_session(client)
    say(client, session_id, "fail")
    wait_idle(client, session_id, stop="retries_exhausted")
    error = next(e for e in events(client, session_id) if e.type == "session.error")
    assert error.error.retry_status.type == "exhausted"
    fake_model.reset([Turn([Text("recovered")])])
    say(client, session_id, "again")
    wait_idle(client, session_id, stop="end_turn", after=len(events(client, session_id)) - 1)


def test_interrupt_stops_a_slow_turn(server: ServerProcess, fake_model: FakeModelServer) -> None:
    fake_model.reset([Turn([Text("slow")], first_token_delay=30), Turn([Text("after")])])
    client = server.client()
    session_id, _ = make_session(client)
    say(client, session_id, "be slow")
    deadline = threading.Event()
    while not any(e.type == "span.model_request_start" for e in events(client, session_id)):
        deadline.wait(0.02)
    client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    wait_idle(client, session_id, stop="end_turn", timeout=5)
    assert client.beta.sessions.retrieve(session_id).status == "idle"
    say(client, session_id, "still usable?")
    n = len(events(client, session_id))
    wait_idle(client, session_id, stop="end_turn", after=n - 1)


def test_session_list_update_archive_delete(server: ServerProcess) -> None:
    client = server.client()
    session_id, agent_id = make_session(client)
    updated = client.beta.sessions.update(session_id, title="t2", metadata={"k": "v"})
    assert updated.title == "t2" and updated.metadata == {"k": "v"}
    listed = [
        s.id for s in client.beta.sessions.list(agent_id=agent_id, statuses=["idle"], order="asc")
    ]
    assert listed == [session_id]
    assert [e.type for e in events(client, session_id)] == ["session.updated"]
    assert client.beta.sessions.archive(session_id).archived_at is not None
    assert session_id not in [s.id for s in client.beta.sessions.list(agent_id=agent_id)]
    assert client.beta.sessions.delete(session_id).type == "session_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.beta.sessions.retrieve(session_id)


def test_session_create_rejects_what_it_cannot_serve(server: ServerProcess) -> None:
    client = server.client()
    agent = client.beta.agents.create(model="claude-haiku-4-5", name="r", tools=[LOOKUP])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e")
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            resources=[{"type": "github_repository", "url": "http://github.com/o/r"}],
        )
    assert "resources[0].url" in info.value.message  # plain http only to allowed private hosts
    with pytest.raises(anthropic.NotFoundError):
        client.beta.sessions.create(agent="agent_missing", environment_id=env.id)
    with pytest.raises(anthropic.NotFoundError):
        client.beta.sessions.create(agent=agent.id, environment_id="env_missing")


def test_events_list_pages_both_ways(server: ServerProcess, fake_model: FakeModelServer) -> None:
    fake_model.reset([Turn([Text("one")]), Turn([Text("two")])])
    client = server.client()
    session_id, _ = make_session(client)
    say(client, session_id, "a")
    wait_idle(client, session_id, stop="end_turn")
    say(client, session_id, "b")
    wait_idle(client, session_id, stop="end_turn", after=7)
    forward = [e.id for e in client.beta.sessions.events.list(session_id, limit=2)]
    backward = [e.id for e in client.beta.sessions.events.list(session_id, limit=3, order="desc")]
    assert forward == list(reversed(backward)) and len(forward) == 14
    only = list(client.beta.sessions.events.list(session_id, types=["agent.message"]))
    assert [e.content[0].text for e in only] == ["one", "two"]


def test_idle_streams_get_pings_and_unknown_sessions_404(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", env={"CORRAL_SSE_PING_SECONDS": "0.2"}).start()
    try:
        client = server.client()
        agent = client.beta.agents.create(model="claude-haiku-4-5", name="p")
        env = client.beta.environments.create(name="e")
        session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
        headers = {"x-api-key": API_KEY}
        url = f"{server.url}/v1/sessions/{session.id}/events/stream"
        with httpx.stream("GET", url, headers=headers, timeout=10) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = response.iter_lines()
            pings = [line for line in itertools.islice(lines, 12) if line == "event: ping"]
        assert len(pings) >= 2
        with (
            pytest.raises(anthropic.NotFoundError),
            client.beta.sessions.events.stream("sesn_missing") as stream,
        ):
            next(iter(stream))
        missing_key = httpx.get(url, timeout=5)
        assert missing_key.status_code == 401
    finally:
        server.stop()


def test_message_sent_while_the_model_streams_is_answered(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset(
        [Turn([Text("first answer")], first_token_delay=1.0), Turn([Text("second answer")])]
    )
    client = server.client()
    session_id, _ = make_session(client)
    say(client, session_id, "first question")
    while not any(e.type == "span.model_request_start" for e in events(client, session_id)):
        threading.Event().wait(0.02)
    say(client, session_id, "second question, sent mid-stream")
    deadline = threading.Event()
    for _ in range(300):
        texts = [e.content[0].text for e in events(client, session_id) if e.type == "agent.message"]
        if texts == ["first answer", "second answer"]:
            break
        deadline.wait(0.05)
    assert texts == ["first answer", "second answer"]
    last_request = fake_model.requests[-1]["messages"]
    assert "second question" in str(last_request)
    wait_idle(client, session_id, stop="end_turn")
