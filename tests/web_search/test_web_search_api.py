"""web_search end to end: the official SDK against a real server whose `[web_search]` points at
a loopback SearXNG stand-in, the fake model calling the tool; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.fakes.search_server import FakeSearchServer, Hit
from tests.server import ServerProcess, backend_env

HITS = [
    Hit("Corral docs", "https://docs.example.com/guide", "The guide", "3 days ago"),
    Hit("Example blog", "https://example.org/post", "A post"),
    Hit("Tracker", "https://ads.tracker.example.net/x", "Buy now"),
]


@pytest.fixture(scope="module")
def stand_in() -> Iterator[FakeSearchServer]:
    with FakeSearchServer(results=list(HITS)) as server:
        yield server


def searxng_server(
    data_dir: Path, fake_model: FakeModelServer, stand_in: FakeSearchServer, env: dict[str, str]
) -> ServerProcess:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "corral.toml").write_text(
        f'[web_search]\nprovider = "searxng"\nurl = "{stand_in.url}"\n'
    )
    return ServerProcess(data_dir, model_url=fake_model.url, env=env).start()


@pytest.fixture(scope="module")
def search_server(
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModelServer,
    stand_in: FakeSearchServer,
    backend: str,
) -> Iterator[ServerProcess]:
    """A server allowed to reach the stand-in (`[egress] allow_private` by environment)."""
    with backend_env(backend) as env:
        env["CORRAL_EGRESS_ALLOW_PRIVATE"] = f"127.0.0.1:{stand_in.port}"
        proc = searxng_server(tmp_path_factory.mktemp("ws"), fake_model, stand_in, env)
        yield proc
        proc.stop()


@pytest.fixture
def client(search_server: ServerProcess, stand_in: FakeSearchServer) -> anthropic.Anthropic:
    stand_in.results, stand_in.status = list(HITS), 200
    stand_in.seen.clear()
    return search_server.client()


def session_with(client: anthropic.Anthropic, config: dict[str, Any]) -> str:
    toolset = {"type": "agent_toolset_20260401", "configs": [{"name": "web_search", **config}]}
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="s", tools=[toolset])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a model request's last (user) message."""
    last = request["messages"][-1]
    assert last["role"] == "user"
    return [b for b in last["content"] if b.get("type") == "tool_result"]


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "".join(c["text"] for c in content)


def searches(client: anthropic.Anthropic, session_id: str) -> int | None:
    usage = client.beta.sessions.retrieve(session_id).usage
    server_tools = usage.server_tool_use if usage is not None else None
    return server_tools.web_search_requests if server_tools is not None else None


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, [h.url for h in HITS]),
        ({"allowed_domains": ["example.com"]}, ["https://docs.example.com/guide"]),
        ({"blocked_domains": ["tracker.example.net"]}, [h.url for h in HITS[:2]]),
    ],
)
def test_results_reach_the_model_filtered_and_counted(
    client: anthropic.Anthropic,
    fake_model: FakeModelServer,
    stand_in: FakeSearchServer,
    config: dict[str, Any],
    expected: list[str],
) -> None:
    fake_model.reset(
        [Turn([ToolUse("web_search", {"query": "corral agents"})]), Turn([Text("found")])]
    )
    session_id = session_with(client, config)
    say(client, session_id, "search please")
    wait_idle(client, session_id, stop="end_turn")

    first, second = fake_model.requests
    [tool] = [t for t in first["tools"] if t["name"] == "web_search"]
    assert tool["input_schema"]["required"] == ["query"]
    [seen] = stand_in.seen
    assert seen.query == {"q": ["corral agents"], "format": ["json"]}
    [block] = tool_results(second)
    assert not block.get("is_error")
    doc = json.loads(result_text(block))
    assert doc["query"] == "corral agents"
    assert [r["url"] for r in doc["results"]] == expected
    assert set(doc["results"][0]) >= {"title", "url", "snippet"}

    log = events(client, session_id)
    [use] = [e for e in log if e.type == "agent.tool_use"]
    assert (use.name, use.evaluated_permission) == ("web_search", "allow")
    [result] = [e for e in log if e.type == "agent.tool_result"]
    assert result.tool_use_id == use.id and not result.is_error
    assert not any(e.type.startswith("corral.") for e in log)
    assert searches(client, session_id) == 1


def test_max_uses_caps_searches_per_turn(
    client: anthropic.Anthropic, fake_model: FakeModelServer, stand_in: FakeSearchServer
) -> None:
    fake_model.reset(
        [
            Turn([ToolUse("web_search", {"query": q}) for q in ("one", "two")]),
            Turn([Text("first turn done")]),
            Turn([ToolUse("web_search", {"query": "three"})]),
            Turn([Text("second turn done")]),
        ]
    )
    session_id = session_with(client, {"max_uses": 1})
    say(client, session_id, "search twice")
    idle = wait_idle(client, session_id, stop="end_turn")
    blocks = tool_results(fake_model.requests[1])
    assert [bool(b.get("is_error")) for b in blocks] == [False, True]
    assert "max_uses exceeded" in result_text(blocks[1])
    assert [s.query["q"] for s in stand_in.seen] == [["one"]]
    assert searches(client, session_id) == 1

    # A new turn may search again.
    after = len(events(client, session_id))
    say(client, session_id, "again")
    wait_idle(client, session_id, stop="end_turn", after=after)
    assert idle is not None
    assert not tool_results(fake_model.requests[3])[0].get("is_error")
    assert [s.query["q"] for s in stand_in.seen] == [["one"], ["three"]]
    assert searches(client, session_id) == 2


def test_provider_failure_is_an_error_result_and_the_turn_goes_on(
    client: anthropic.Anthropic, fake_model: FakeModelServer, stand_in: FakeSearchServer
) -> None:
    stand_in.status = 503
    fake_model.reset([Turn([ToolUse("web_search", {"query": "down"})]), Turn([Text("sorry")])])
    session_id = session_with(client, {})
    say(client, session_id, "search")
    wait_idle(client, session_id, stop="end_turn")
    [block] = tool_results(fake_model.requests[1])
    assert block.get("is_error") and "HTTP 503" in result_text(block)
    assert searches(client, session_id) == 1


def test_an_empty_query_is_refused_without_a_search(
    client: anthropic.Anthropic, fake_model: FakeModelServer, stand_in: FakeSearchServer
) -> None:
    fake_model.reset([Turn([ToolUse("web_search", {"query": " "})]), Turn([Text("ok")])])
    session_id = session_with(client, {})
    say(client, session_id, "search")
    wait_idle(client, session_id, stop="end_turn")
    [block] = tool_results(fake_model.requests[1])
    assert block.get("is_error") and "non-empty" in result_text(block)
    assert stand_in.seen == [] and searches(client, session_id) is None


def test_permission_policy_always_ask_applies(
    client: anthropic.Anthropic, fake_model: FakeModelServer, stand_in: FakeSearchServer
) -> None:
    fake_model.reset([Turn([ToolUse("web_search", {"query": "ask"})]), Turn([Text("ok")])])
    session_id = session_with(client, {"permission_policy": {"type": "always_ask"}})
    say(client, session_id, "search")
    idle = wait_idle(client, session_id, stop="requires_action")
    assert stand_in.seen == []
    client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.tool_confirmation",
                "tool_use_id": idle.stop_reason.event_ids[0],
                "result": "deny",
            }
        ],
    )
    wait_idle(client, session_id, stop="end_turn")
    assert stand_in.seen == [] and searches(client, session_id) is None


def test_without_a_provider_enabling_web_search_is_a_400_naming_the_setting(
    server: ServerProcess,
) -> None:
    config = {"name": "web_search", "enabled": True}
    toolset = {"type": "agent_toolset_20260401", "configs": [config]}
    client = server.client()
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.agents.create(model="claude-sonnet-4-5", name="x", tools=[toolset])  # type: ignore[list-item]
    assert "[web_search] provider" in info.value.message
    plain = client.beta.agents.create(
        model="claude-sonnet-4-5", name="x", tools=[{"type": "agent_toolset_20260401"}]
    )
    [resolved] = plain.model_dump()["tools"]
    assert {c["name"]: c["enabled"] for c in resolved["configs"]}["web_search"] is False


def test_a_loopback_provider_is_refused_without_an_allow_rule(
    tmp_path: Path, fake_model: FakeModelServer, stand_in: FakeSearchServer
) -> None:
    stand_in.seen.clear()
    proc = searxng_server(tmp_path / "data", fake_model, stand_in, {})
    try:
        client = proc.client()
        fake_model.reset([Turn([ToolUse("web_search", {"query": "x"})]), Turn([Text("ok")])])
        session_id = session_with(client, {})
        say(client, session_id, "search")
        wait_idle(client, session_id, stop="end_turn")
        [block] = tool_results(fake_model.requests[1])
        assert block.get("is_error") and "not allowed" in result_text(block)
        assert stand_in.seen == []
    finally:
        proc.stop()


def test_a_missing_api_key_variable_stops_the_server_naming_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "corral.toml").write_text(
        '[web_search]\nprovider = "brave"\napi_key_env = "BRAVE_SEARCH_KEY"\n'
    )
    with pytest.raises(RuntimeError) as info:
        ServerProcess(data).start()
    message = " ".join(str(info.value).split())  # the console wraps long lines
    assert "[web_search] api_key_env: environment variable BRAVE_SEARCH_KEY is not set" in message
