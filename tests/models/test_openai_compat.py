from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral.models.base import ModelError, ModelUsage, TextDelta, ThinkingStarted
from corral.models.openai_compat import OpenAICompatClient
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
from tests.models.support import drain, make_request

pytestmark = pytest.mark.anyio

HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Two calls.", "signature": "sig"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "P"}},
            {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "R"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
            {
                "type": "tool_result",
                "tool_use_id": "call_2",
                "content": [{"type": "text", "text": "no such city"}],
                "is_error": True,
            },
            {"type": "text", "text": "Thanks."},
        ],
    },
]


@pytest.fixture
async def client(fake: FakeModelServer) -> AsyncIterator[OpenAICompatClient]:
    client = OpenAICompatClient(fake.openai_url)
    yield client
    await client.aclose()


async def test_text_streams_deltas_then_final_with_usage(
    fake: FakeModelServer, client: OpenAICompatClient
) -> None:
    usage = Usage(input_tokens=20, output_tokens=6, cache_read_input_tokens=5)
    fake.handler = ScriptedTurns([Turn([Text("Hello from llama!")], chunk_size=4, usage=usage)])

    previews, final = await drain(client, make_request())

    assert all(isinstance(p, TextDelta) and p.index == 0 for p in previews)
    assert "".join(p.text for p in previews if isinstance(p, TextDelta)) == "Hello from llama!"
    assert final.content == [{"type": "text", "text": "Hello from llama!"}]
    assert final.stop_reason == "end_turn"
    assert final.usage == ModelUsage(input_tokens=20, output_tokens=6, cache_read_input_tokens=5)


async def test_parallel_tool_calls_become_tool_use_blocks_keeping_call_ids(
    fake: FakeModelServer, client: OpenAICompatClient
) -> None:
    nested = {"command": "echo 'x'", "opts": {"n": [1, 2]}}
    fake.handler = ScriptedTurns(
        [
            Turn(
                [
                    Text("Calling."),
                    ToolUse("get_weather", {"city": "Paris"}, id="call_abc"),
                    ToolUse("bash", nested, id="call_def"),
                ],
                chunk_size=5,
            )
        ]
    )

    _, final = await drain(client, make_request())

    assert final.content == [
        {"type": "text", "text": "Calling."},
        {"type": "tool_use", "id": "call_abc", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_def", "name": "bash", "input": nested},
    ]
    assert final.stop_reason == "tool_use"


async def test_reasoning_becomes_a_thinking_block(
    fake: FakeModelServer, client: OpenAICompatClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Thinking("Hmm, let me see."), Text("Yes.")])])

    previews, final = await drain(client, make_request())

    assert previews == [ThinkingStarted(index=0), TextDelta(index=1, text="Yes.")]
    assert final.content[0] == {"type": "thinking", "thinking": "Hmm, let me see.", "signature": ""}


async def test_length_finish_is_max_tokens(
    fake: FakeModelServer, client: OpenAICompatClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Text("cut")], stop_reason="max_tokens")])
    _, final = await drain(client, make_request())
    assert final.stop_reason == "max_tokens"


async def test_slow_first_token_still_completes(
    fake: FakeModelServer, client: OpenAICompatClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Text("late")], first_token_delay=0.5)])
    _, final = await drain(client, make_request())
    assert final.content == [{"type": "text", "text": "late"}]


async def test_request_is_translated_to_chat_format(
    fake: FakeModelServer, client: OpenAICompatClient
) -> None:
    fake.handler = ScriptedTurns([Turn([Text("ok")])])

    await drain(client, make_request(messages=HISTORY))

    body = fake.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 8192
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    calls = [
        {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
        }
        for n, city in ((1, "P"), (2, "R"))
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: no such city"},
        {"role": "user", "content": "Thanks."},
    ]


@pytest.mark.parametrize(
    ("reply", "kind", "retryable"),
    [
        (ErrorReply(status=529), "overloaded", True),
        (ErrorReply(status=429), "rate_limited", True),
        (ErrorReply(status=500), "request_failed", True),
        (ErrorReply(status=401), "authentication", False),
        (ErrorReply(status=400), "invalid_request", False),
        (ErrorReply(status=529, mid_stream=True), "overloaded", True),
        (ErrorReply(status=429, mid_stream=True), "rate_limited", True),
        (ErrorReply(status=503, mid_stream=True), "request_failed", True),
    ],
)
async def test_errors_map_to_model_error(
    fake: FakeModelServer,
    client: OpenAICompatClient,
    reply: ErrorReply,
    kind: str,
    retryable: bool,
) -> None:
    fake.handler = ScriptedTurns([reply])
    with pytest.raises(ModelError) as caught:
        await drain(client, make_request())
    assert (caught.value.kind, caught.value.retryable) == (kind, retryable)
    assert reply.error_message in caught.value.message


async def test_unreachable_server_is_a_retryable_failure() -> None:
    with FakeModelServer(ScriptedTurns([])) as gone:
        url = gone.openai_url
    client = OpenAICompatClient(url)
    try:
        with pytest.raises(ModelError) as caught:
            await drain(client, make_request())
    finally:
        await client.aclose()
    assert (caught.value.kind, caught.value.retryable) == ("request_failed", True)


async def test_key_and_upstream_model_reach_the_server(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns([Turn([Text("hi")])])
    client = OpenAICompatClient(fake.openai_url, "local-key", upstream_model="llama3.1:8b")
    try:
        await drain(client, make_request(model="llama-local"))
    finally:
        await client.aclose()
    recorded = fake.recorded[0]
    assert recorded.body["model"] == "llama3.1:8b"
    assert recorded.headers["authorization"] == "Bearer local-key"


async def test_configured_but_missing_key_fails_naming_the_variable(
    fake: FakeModelServer,
) -> None:
    client = OpenAICompatClient(fake.openai_url, None, api_key_name="VLLM_API_KEY")
    with pytest.raises(ModelError) as caught:
        await drain(client, make_request())
    await client.aclose()
    assert (caught.value.kind, caught.value.retryable) == ("authentication", False)
    assert "VLLM_API_KEY" in caught.value.message
    assert fake.requests == []


async def test_stream_cut_without_finish_reason_is_retryable(
    fake: FakeModelServer, client: OpenAICompatClient
) -> None:
    fake.handler = ScriptedTurns([ErrorReply(mid_stream=True, drop=True)])
    with pytest.raises(ModelError) as caught:
        await drain(client, make_request())
    assert (caught.value.kind, caught.value.retryable) == ("request_failed", True)
