from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import anyio
import openai
import pytest

from corral.models.anthropic import AnthropicClient
from corral.models.base import ModelResponse
from tests.fakes.messages_server import (
    ErrorReply,
    FakeModelServer,
    Reply,
    ScriptedTurns,
    Text,
    ToolUse,
    Turn,
    by_marker,
    first_user_text,
)
from tests.models.support import drain, make_request

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


async def test_two_hundred_concurrent_streams(fake: FakeModelServer) -> None:
    def echo(request: dict[str, Any]) -> Reply:
        text = first_user_text(request)
        return Turn([Text(f"answer to {text}")], chunk_size=4, chunk_delay=0.002)

    fake.handler = echo
    client = AnthropicClient("test-key", fake.url)
    answers: dict[int, ModelResponse] = {}

    async def one(n: int) -> None:
        _, answers[n] = await drain(client, make_request(f"session {n}"))

    try:
        async with anyio.create_task_group() as group:
            for n in range(200):
                group.start_soon(one, n)
    finally:
        await client.aclose()
    assert len(fake.requests) == 200
    for n, final in answers.items():
        assert final.content == [{"type": "text", "text": f"answer to session {n}"}]


async def test_by_marker_gives_each_session_its_own_script(fake: FakeModelServer) -> None:
    fake.handler = by_marker(
        {
            "alpha": [Turn([ToolUse("bash", {"command": "ls"})]), Turn([Text("alpha done")])],
            "beta": [Turn([Text("beta done")])],
        }
    )
    client = AnthropicClient("test-key", fake.url)
    try:
        _, a1 = await drain(client, make_request("task alpha"))
        _, b1 = await drain(client, make_request("task beta"))
        history = [{"role": "user", "content": "task alpha"}, *_continue(a1)]
        _, a2 = await drain(client, make_request(messages=history))
    finally:
        await client.aclose()
    assert a1.stop_reason == "tool_use"
    assert b1.content == [{"type": "text", "text": "beta done"}]
    assert a2.content == [{"type": "text", "text": "alpha done"}]


def _continue(response: ModelResponse) -> list[dict[str, Any]]:
    tool_id = response.content[0]["id"]
    result = {"type": "tool_result", "tool_use_id": tool_id, "content": "files"}
    return [
        {"role": "assistant", "content": response.content},
        {"role": "user", "content": [result]},
    ]


def test_scripts_answer_in_order_then_report_exhaustion() -> None:
    script = ScriptedTurns([Turn([Text("one")]), ErrorReply(status=429)])
    assert script({}) == Turn([Text("one")])
    assert script({}) == ErrorReply(status=429)
    exhausted = script({})
    assert isinstance(exhausted, ErrorReply)
    assert exhausted.status == 400
    assert script.served == 2
    assert ScriptedTurns([Turn([Text("x")])], repeat_last=True)({}) == Turn([Text("x")])


def test_unmatched_marker_is_a_client_error() -> None:
    reply = by_marker({"alpha": []})({"messages": [{"role": "user", "content": "nothing"}]})
    assert isinstance(reply, ErrorReply)
    assert reply.status == 400


async def test_non_streaming_requests_get_json(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns(
        [
            Turn([Text("plain"), ToolUse("bash", {"command": "pwd"}, id="toolu_x")]),
            Turn([Text("chat"), ToolUse("bash", {"command": "pwd"}, id="call_x")]),
        ]
    )
    sdk = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)
    chat = openai.AsyncOpenAI(api_key="k", base_url=fake.openai_url, max_retries=0)
    try:
        message = await sdk.messages.create(
            model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
        completion = await chat.chat.completions.create(
            model="llama", messages=[{"role": "user", "content": "hi"}]
        )
    finally:
        await sdk.close()
        await chat.close()
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "chat"
    assert choice.message.tool_calls is not None
    assert choice.message.tool_calls[0].id == "call_x"


def test_runs_as_a_separate_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    turn = {"blocks": [{"type": "text", "text": "from a process"}]}
    script.write_text(json.dumps([turn]))
    command = [sys.executable, "-m", "tests.fakes.messages_server", "--script", str(script)]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            url = process.stdout.readline().split(" on ")[1].split()[0]
            final = anyio.run(_ask_once, url)
        finally:
            process.terminate()
    assert final.content == [{"type": "text", "text": "from a process"}]


async def _ask_once(url: str) -> ModelResponse:
    client = AnthropicClient("test-key", url)
    try:
        _, final = await drain(client, make_request())
    finally:
        await client.aclose()
    return final
