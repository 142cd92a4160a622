"""`run_demo` drives a Managed Agents API through the official SDK and reads the answer right.

The API is `FakeAgentsApi` behind the SDK's HTTP transport (the real Corral server is tested
elsewhere); what is pinned here is the runner's side: the calls it makes and its event loop.
"""

from __future__ import annotations

import io
from pathlib import Path

import anthropic
import httpx2
from rich.console import Console

from corral.demo.runner import USER_PROMPT, DemoResult, run_demo
from tests.demo.fake_agents_api import SESSION, FakeAgentsApi


def sdk_client(api: FakeAgentsApi) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url="http://corral.test",
        api_key="test-key",
        max_retries=0,
        http_client=httpx2.Client(transport=api.transport()),
    )


def run(api: FakeAgentsApi, data: Path) -> tuple[str, DemoResult]:
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False, color_system=None)
    result = run_demo(
        "http://corral.test", "test-key", console=console, data_dir=data, client=sdk_client(api)
    )
    return out.getvalue(), result


def test_the_demo_finds_both_causes_through_the_sdk(demo_data: Path) -> None:
    api = FakeAgentsApi()
    printed, result = run(api, demo_data)
    assert result.session_id == SESSION
    assert result.stop_reason == "end_turn"
    assert result.found_commits == {"a3f9c21", "c81d4e7"}
    assert result.solved and result.scripted
    assert result.tool_calls == {
        "list_incidents": 1,
        "get_recent_deploys": 1,
        "get_metrics": 4,
        "get_diff": 2,
    }
    assert result.input_tokens == api.usage["input_tokens"] > 0
    assert "symptom of checkout" in result.final_text
    assert "scripted demo model" in printed and "solved" in printed
    assert "🧩 get_diff" in printed and "requires_action: 5 pending" in printed


def test_the_runner_makes_the_documented_calls(demo_data: Path) -> None:
    api = FakeAgentsApi()
    run(api, demo_data)
    paths = [(m, p) for m, p, _ in api.requests]
    assert paths[:4] == [
        ("POST", "/v1/environments"),
        ("POST", "/v1/agents"),
        ("POST", "/v1/sessions"),
        ("GET", f"/v1/sessions/{SESSION}/events/stream"),
    ]
    env = api.requests[0][2]
    assert env["config"] == {"type": "cloud", "networking": {"type": "unrestricted"}}
    assert api.agent["name"] == "incident-commander" and api.agent["model"] == "corral-scripted"
    assert api.agent["tools"][0] == {"type": "agent_toolset_20260401"}
    assert [t["name"] for t in api.agent["tools"][1:]] == [
        "list_incidents",
        "get_recent_deploys",
        "get_metrics",
        "get_diff",
    ]
    assert all(t["type"] == "custom" and "input_schema" in t for t in api.agent["tools"][1:])
    sent = [
        e for m, p, b in api.requests if m == "POST" and p.endswith("/events") for e in b["events"]
    ]
    assert sent[0] == {"type": "user.message", "content": [{"type": "text", "text": USER_PROMPT}]}
    results = [e for e in sent if e["type"] == "user.custom_tool_result"]
    assert len(results) == 8 and not any(e["is_error"] for e in results)
    assert len({e["custom_tool_use_id"] for e in results}) == 8
    assert paths[-1] == ("GET", f"/v1/sessions/{SESSION}")


def test_a_dropped_stream_is_reopened_and_caught_up(demo_data: Path) -> None:
    api = FakeAgentsApi(drop_first_stream_after=5)
    printed, result = run(api, demo_data)
    assert api.streams == 2
    assert ("GET", f"/v1/sessions/{SESSION}/events", None) in api.requests
    assert result.solved
    answered = [b for m, p, b in api.requests if m == "POST" and p.endswith("/events")]
    ids = [
        e["custom_tool_use_id"]
        for b in answered
        for e in b["events"]
        if e["type"] == "user.custom_tool_result"
    ]
    assert len(ids) == len(set(ids)) == 8  # every call answered exactly once
    assert "reconnecting" in printed
