"""Renders scripted replies as the exact wire bytes of the Anthropic and OpenAI streaming APIs.

Pure formatting plus the scripted delays; no server and no import of corral.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tests.fakes.model_script import Block, ErrorReply, Reply, Text, Thinking, ToolUse, Turn, Usage

_OPENAI_FINISH = {"tool_use": "tool_calls", "end_turn": "stop", "max_tokens": "length"}


def _sse(event: str | None, data: object) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n"


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), max(size, 1))]


def _with_ids(blocks: Sequence[Block], prefix: str) -> list[Block]:
    return [
        ToolUse(b.name, b.input, id=b.id or f"{prefix}{uuid.uuid4().hex[:24]}")
        if isinstance(b, ToolUse)
        else b
        for b in blocks
    ]


def _anthropic_usage(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    }


def _anthropic_block(block: Block) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Thinking):
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}


def _anthropic_block_stream(block: Block, size: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The `content_block_start` payload and the deltas of one block."""
    if isinstance(block, Text):
        deltas = [{"type": "text_delta", "text": c} for c in _chunks(block.text, size)]
        return {"type": "text", "text": ""}, deltas
    if isinstance(block, Thinking):
        deltas = [{"type": "thinking_delta", "thinking": c} for c in _chunks(block.thinking, size)]
        deltas.append({"type": "signature_delta", "signature": block.signature})
        return {"type": "thinking", "thinking": "", "signature": ""}, deltas
    # The real API opens every tool input with an empty partial_json.
    parts = ["", *_chunks(json.dumps(block.input), size)]
    deltas = [{"type": "input_json_delta", "partial_json": c} for c in parts]
    return {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}, deltas


def _anthropic_message(
    model: str, content: list[Any], stop: str | None, usage: Usage
) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": _anthropic_usage(usage),
    }


def anthropic_error(reply: ErrorReply) -> dict[str, Any]:
    """The Messages API error body (also the data of a mid-stream `error` event)."""
    error = {"type": reply.error_type, "message": reply.error_message}
    return {"type": "error", "error": error, "request_id": f"req_{uuid.uuid4().hex[:24]}"}


def _anthropic_cut(reply: ErrorReply) -> list[str]:
    """Some text, then the `error` event that breaks a 200 stream."""
    opening = {"type": "text", "text": ""}
    delta = {"type": "text_delta", "text": "partial "}
    return [
        _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": opening},
        ),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        *([] if reply.drop else [_sse("error", anthropic_error(reply))]),
    ]


async def anthropic_stream(reply: Reply, model: str) -> AsyncIterator[str]:
    """The Messages API SSE stream; an ErrorReply sends some text, then an `error` event."""
    usage = reply.usage if isinstance(reply, Turn) else Usage()
    start_usage = Usage(
        input_tokens=usage.input_tokens,
        output_tokens=1,
        cache_creation_input_tokens=usage.cache_creation_input_tokens,
        cache_read_input_tokens=usage.cache_read_input_tokens,
    )
    message = _anthropic_message(model, [], None, start_usage)
    yield _sse("message_start", {"type": "message_start", "message": message})
    yield _sse("ping", {"type": "ping"})
    if isinstance(reply, ErrorReply):
        for part in _anthropic_cut(reply):
            yield part
        return
    await asyncio.sleep(reply.first_token_delay)
    for index, block in enumerate(_with_ids(reply.blocks, "toolu_")):
        opening, deltas = _anthropic_block_stream(block, reply.chunk_size)
        yield _sse(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": opening},
        )
        for delta in deltas:
            yield _sse(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    stop = {"stop_reason": reply.final_stop_reason, "stop_sequence": None}
    yield _sse(
        "message_delta",
        {"type": "message_delta", "delta": stop, "usage": _anthropic_usage(usage)},
    )
    yield _sse("message_stop", {"type": "message_stop"})


def _openai_usage(usage: Usage) -> dict[str, Any]:
    prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
    }


def openai_error(reply: ErrorReply) -> dict[str, Any]:
    """The OpenAI error body; `code` carries the status, as vLLM does mid-stream."""
    return {
        "error": {
            "message": reply.error_message,
            "type": reply.error_type,
            "param": None,
            "code": reply.status,
        }
    }


class _OpenAIChunks:
    """Builds `chat.completion.chunk` objects sharing one id."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.model = model
        self.include_usage = include_usage
        self.created = int(time.time())

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse(None, self._envelope([choice]))

    def usage(self, usage: Usage) -> str:
        return _sse(None, {**self._envelope([]), "usage": _openai_usage(usage)})

    def _envelope(self, choices: list[Any]) -> dict[str, Any]:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        return {**body, "usage": None} if self.include_usage else body


def _openai_deltas(blocks: Sequence[Block], size: int) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = []
    calls = 0
    for block in blocks:
        if isinstance(block, Text):
            deltas += [{"content": c} for c in _chunks(block.text, size)]
        elif isinstance(block, Thinking):
            deltas += [{"reasoning_content": c} for c in _chunks(block.thinking, size)]
        else:
            function = {"name": block.name, "arguments": ""}
            head = {"index": calls, "id": block.id, "type": "function", "function": function}
            deltas.append({"tool_calls": [head]})
            for c in _chunks(json.dumps(block.input), size):
                deltas.append({"tool_calls": [{"index": calls, "function": {"arguments": c}}]})
            calls += 1
    return deltas


async def openai_stream(reply: Reply, model: str, include_usage: bool) -> AsyncIterator[str]:
    """Chat completion chunks ending in `[DONE]`; an ErrorReply cuts in with an error object."""
    chunks = _OpenAIChunks(model, include_usage)
    yield chunks.chunk({"role": "assistant", "content": ""})
    if isinstance(reply, ErrorReply):
        yield chunks.chunk({"content": "partial "})
        if not reply.drop:
            yield _sse(None, openai_error(reply))
        return
    await asyncio.sleep(reply.first_token_delay)
    for delta in _openai_deltas(_with_ids(reply.blocks, "call_"), reply.chunk_size):
        yield chunks.chunk(delta)
        if reply.chunk_delay:
            await asyncio.sleep(reply.chunk_delay)
    yield chunks.chunk({}, _OPENAI_FINISH.get(reply.final_stop_reason, "stop"))
    if include_usage:
        yield chunks.usage(reply.usage)
    yield "data: [DONE]\n\n"


def openai_completion(turn: Turn, model: str) -> dict[str, Any]:
    """The non-streaming chat completion answer."""
    blocks = _with_ids(turn.blocks, "call_")
    text = "".join(b.text for b in blocks if isinstance(b, Text))
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(b.input)},
        }
        for b in blocks
        if isinstance(b, ToolUse)
    ]
    if calls:
        message["tool_calls"] = calls
    finish = _OPENAI_FINISH.get(turn.final_stop_reason, "stop")
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": _openai_usage(turn.usage),
    }


def anthropic_message(turn: Turn, model: str) -> dict[str, Any]:
    """The non-streaming Messages API answer."""
    content = [_anthropic_block(b) for b in _with_ids(turn.blocks, "toolu_")]
    return _anthropic_message(model, content, turn.final_stop_reason, turn.usage)
