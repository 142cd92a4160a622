from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral.models.anthropic import AnthropicClient, build_params
from corral.models.base import ModelError, ModelUsage, TextDelta, ThinkingStarted
from tests.fakes.messages_server import (
    ErrorReply,
    FakeModelServer,
    ScriptedTurns,
    Text,
    Thinking,
    ToolUse,
    Turn,
    Usage,
)
from tests.models.support import TOOLS, drain, make_request

pytestmark = pytest.mark.anyio

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "P"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
            {"type": "text", "text": "Thanks."},
        ],
    },
]


@pytest.fixture
async def client(fake: FakeModelServer) -> AsyncIterator[AnthropicClient]:
    client = AnthropicClient("test-key", fake.url)
    yield client
    await client.aclose()


async def test_text_streams_deltas_then_one_final_response(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    usage = Usage(
        input_tokens=12, output_tokens=7, cache_creation_input_tokens=3, cache_read_input_tokens=4
    )
    fake.handler = ScriptedTurns([Turn([Text("Hello there, world!")], chunk_size=5, usage=usage)])

    previews, final = await drain(client, make_request())

    assert all(isinstance(p, TextDelta) and p.index == 0 for p in previews)
    assert len(previews) == 4
    assert "".join(p.text for p in previews if isinstance(p, TextDelta)) == "Hello there, world!"
    assert final.content == [{"type": "text", "text": "Hello there, world!"}]
    assert final.stop_reason == "end_turn"
    assert final.usage == ModelUsage(
        input_tokens=12, output_tokens=7, cache_creation_input_tokens=3, cache_read_input_tokens=4
    )


async def test_parallel_tool_use_blocks_carry_parsed_json_input(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    nested = {"command": "ls -la", "env": {"A": [1, 2, {"b": None}]}, "quote": 'say "hi"'}
    fake.handler = ScriptedTurns(
        [
            Turn(
                [
                    Text("Two calls."),
                    ToolUse("get_weather", {"city": "Paris"}, id="toolu_a"),
                    ToolUse("bash", nested, id="toolu_b"),
                ],
                chunk_size=3,
            )
        ]
    )

    _, final = await drain(client, make_request())

    assert final.content == [
        {"type": "text", "text": "Two calls."},
        {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "toolu_b", "name": "bash", "input": nested},
    ]
    assert final.stop_reason == "tool_use"


async def test_thinking_block_previews_start_and_keeps_signature(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    fake.handler = ScriptedTurns(
        [Turn([Thinking("Let me think about it.", signature="sig-1"), Text("Done.")])]
    )

    previews, final = await drain(client, make_request())

    assert previews[0] == ThinkingStarted(index=0)
    assert previews[1:] == [TextDelta(index=1, text="Done.")]
    assert final.content[0] == {
        "type": "thinking",
        "thinking": "Let me think about it.",
        "signature": "sig-1",
    }


async def test_explicit_stop_reason_passes_through(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Text("cut")], stop_reason="max_tokens")])
    _, final = await drain(client, make_request())
    assert final.stop_reason == "max_tokens"


async def test_slow_first_token_still_completes(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Text("late")], first_token_delay=0.5, chunk_delay=0.01)])
    _, final = await drain(client, make_request())
    assert final.content == [{"type": "text", "text": "late"}]


async def test_stall_longer_than_timeout_is_a_retryable_failure(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns([Turn([Text("too late")], first_token_delay=3.0)])
    client = AnthropicClient("test-key", fake.url, timeout=0.3)
    try:
        with pytest.raises(ModelError) as caught:
            await drain(client, make_request())
    finally:
        await client.aclose()
    assert (caught.value.kind, caught.value.retryable) == ("request_failed", True)
    assert "the model sent nothing for 0.3 s" in caught.value.message


@pytest.mark.parametrize(
    ("reply", "kind", "retryable"),
    [
        (ErrorReply(status=529), "overloaded", True),
        (ErrorReply(status=429), "rate_limited", True),
        (ErrorReply(status=500), "request_failed", True),
        (ErrorReply(status=503, type="api_error"), "request_failed", True),
        (ErrorReply(status=401), "authentication", False),
        (ErrorReply(status=403), "authentication", False),
        (ErrorReply(status=400), "invalid_request", False),
        (ErrorReply(status=404), "invalid_request", False),
        (ErrorReply(status=529, mid_stream=True), "overloaded", True),
        (ErrorReply(status=429, mid_stream=True), "rate_limited", True),
        (ErrorReply(status=500, mid_stream=True), "request_failed", True),
    ],
)
async def test_errors_map_to_model_error(
    fake: FakeModelServer,
    client: AnthropicClient,
    reply: ErrorReply,
    kind: str,
    retryable: bool,
) -> None:
    fake.handler = ScriptedTurns([reply])
    with pytest.raises(ModelError) as caught:
        await drain(client, make_request())
    assert (caught.value.kind, caught.value.retryable) == (kind, retryable)
    assert reply.error_message in caught.value.message


async def test_mid_stream_error_comes_after_previews(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    fake.handler = ScriptedTurns([ErrorReply(status=529, mid_stream=True)])
    seen = []
    with pytest.raises(ModelError) as caught:
        async for event in client.stream(make_request()):
            seen.append(event)
    assert seen == [TextDelta(index=0, text="partial ")]
    assert caught.value.kind == "overloaded"


async def test_unreachable_server_is_a_retryable_failure() -> None:
    with FakeModelServer(ScriptedTurns([])) as gone:
        url = gone.url
    client = AnthropicClient("test-key", url)
    try:
        with pytest.raises(ModelError) as caught:
            await drain(client, make_request())
    finally:
        await client.aclose()
    assert (caught.value.kind, caught.value.retryable) == ("request_failed", True)


async def test_cache_breakpoints_mark_last_tool_system_and_last_block(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Text("ok")])])
    request = make_request(messages=HISTORY)
    before = copy.deepcopy(request)

    await drain(client, request)

    body = fake.requests[0]
    ephemeral = {"type": "ephemeral"}
    assert [t.get("cache_control") for t in body["tools"]] == [None, ephemeral]
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": ephemeral}
    ]
    marked = [
        (m, b)
        for m, message in enumerate(body["messages"])
        for b, block in enumerate(
            message["content"] if isinstance(message["content"], list) else []
        )
        if "cache_control" in block
    ]
    assert marked == [(2, 1)]
    assert request == before, "the request must not be mutated"


async def test_cache_breakpoint_on_string_content_and_off_switch(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Text("a")]), Turn([Text("b")])])

    await drain(client, make_request("plain string"))
    await drain(client, make_request("plain string", cache_breakpoints=False))

    cached, uncached = fake.requests
    assert cached["messages"][-1]["content"] == [
        {"type": "text", "text": "plain string", "cache_control": {"type": "ephemeral"}}
    ]
    assert uncached["system"] == "You are terse."
    assert uncached["messages"] == [{"role": "user", "content": "plain string"}]
    assert uncached["tools"] == TOOLS


def test_cache_breakpoint_skips_thinking_blocks() -> None:
    prefill = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "thinking", "thinking": "t"}],
        },
    ]
    params = build_params(make_request(messages=prefill))
    content = params["messages"][-1]["content"]
    assert "cache_control" in content[0]
    assert "cache_control" not in content[1]


async def test_missing_key_fails_on_first_use_naming_the_variable(
    fake: FakeModelServer,
) -> None:
    client = AnthropicClient(None, fake.url)
    with pytest.raises(ModelError) as caught:
        await drain(client, make_request())
    await client.aclose()
    assert caught.value.kind == "authentication"
    assert not caught.value.retryable
    assert "ANTHROPIC_API_KEY" in caught.value.message
    assert fake.requests == []


async def test_key_and_upstream_model_reach_the_server(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns([Turn([Text("hi")])])
    client = AnthropicClient("secret-123", fake.url, upstream_model="claude-upstream")
    try:
        await drain(client, make_request())
    finally:
        await client.aclose()
    recorded = fake.recorded[0]
    assert recorded.body["model"] == "claude-upstream"
    assert recorded.headers["x-api-key"] == "secret-123"
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in recorded.headers


async def test_stream_cut_without_message_stop_is_retryable(
    fake: FakeModelServer, client: AnthropicClient
) -> None:
    fake.handler = ScriptedTurns([ErrorReply(mid_stream=True, drop=True)])
    with pytest.raises(ModelError) as caught:
        await drain(client, make_request())
    assert (caught.value.kind, caught.value.retryable) == ("request_failed", True)
