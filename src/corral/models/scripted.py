"""`corral-scripted`: a deterministic offline model that plays a story given to it (the demo's).

Its reply depends only on the request (messages and tools), so a repeated call after a crash is
byte-identical. It is a labelled demo fake, never a stand-in for a real model's judgement.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from corral.models.base import ModelRequest, ModelResponse, ModelStreamEvent, ModelUsage, TextDelta

MODEL_NAME = "corral-scripted"
LABEL = "[corral-scripted]"


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    """One tool call of the current turn and, once it arrived, its result."""

    name: str
    input: dict[str, Any]
    result: str | None = None
    is_error: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """What the model sees: the human prompt that opened the turn and the calls since then."""

    prompt: str
    calls: tuple[Call, ...]
    last: tuple[Call, ...]
    """The calls of the latest assistant message (their errors are mentioned next)."""
    tools: frozenset[str]
    system: str = ""
    """The request's system prompt (a story may play several agents, told apart by it)."""
    inputs: tuple[str, ...] = ()
    """Text that arrived after the prompt, in order (e.g. replies from other threads)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """The next response: text, then tool calls; no calls means the turn ends."""

    text: str
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()


Story = Callable[[Turn], Move | None]
"""A script: the next move for a turn, or None to fall back to the echo."""


class ScriptedModel:
    """`corral-scripted`: plays its story (the demo's, wired in by the runtime) when the story
    applies to the turn, and a short echo otherwise."""

    def __init__(
        self, *, story: Story | None = None, delay: float = 0.0, words_per_delta: int = 3
    ) -> None:
        """`delay` seconds between text deltas (0: none); `words_per_delta` sets chunk size."""
        self._story = story
        self._delay = delay
        self._words = max(1, words_per_delta)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream the scripted reply: text deltas in word chunks, then one `ModelResponse`."""
        move = plan(request, self._story)
        content: list[dict[str, Any]] = [{"type": "text", "text": move.text}]
        for index, (name, tool_input) in enumerate(move.calls):
            content.append(
                {
                    "type": "tool_use",
                    "id": tool_use_id(request, index),
                    "name": name,
                    "input": tool_input,
                }
            )
        for chunk in text_chunks(move.text, self._words):
            if self._delay > 0:
                await anyio.sleep(self._delay)
            yield TextDelta(index=0, text=chunk)
        yield ModelResponse(
            content=content,
            stop_reason="tool_use" if move.calls else "end_turn",
            usage=_usage(request, content),
        )

    async def aclose(self) -> None:
        """Nothing to release: the model has no connections."""


def plan(request: ModelRequest, story: Story | None = None) -> Move:
    """The move the scripted model makes for `request` (pure; exposed for tests and tools)."""
    turn = read_turn(request)
    move = story(turn) if story is not None else None
    return move if move is not None else _echo(turn.prompt)


def read_turn(request: ModelRequest) -> Turn:
    """The human prompt that opened the current turn and every tool call made since."""
    messages = request.messages
    start = max((i for i, m in enumerate(messages) if _is_prompt(m)), default=0)
    results: dict[str, tuple[str, bool]] = {}
    for message in messages[start:]:
        for block in _blocks(message):
            if message.get("role") == "user" and block.get("type") == "tool_result":
                text = _text(block.get("content"))
                results[str(block.get("tool_use_id"))] = (text, bool(block.get("is_error")))
    calls: list[Call] = []
    last: list[Call] = []
    inputs: list[str] = []
    after = start + 1 if messages and _is_prompt(messages[start]) else start
    for message in messages[after:]:
        if message.get("role") != "assistant":
            inputs += [str(b.get("text", "")) for b in _blocks(message) if b.get("type") == "text"]
            continue
        group = [
            _call(block, results) for block in _blocks(message) if block.get("type") == "tool_use"
        ]
        calls += group
        last = group or last
    prompt = _text(messages[start].get("content")) if messages else ""
    tools = frozenset(str(t.get("name")) for t in request.tools)
    return Turn(
        prompt=prompt,
        calls=tuple(calls),
        last=tuple(last),
        tools=tools,
        system=request.system or "",
        inputs=tuple(inputs),
    )


def tool_use_id(request: ModelRequest, index: int) -> str:
    """`toolu_` + a hash of the conversation and position: same request, same id."""
    seed = json.dumps([request.system, request.messages, index], sort_keys=True, default=str)
    return "toolu_" + hashlib.sha256(seed.encode()).hexdigest()[:24]


def text_chunks(text: str, words: int = 3) -> list[str]:
    """Split `text` into chunks of `words` words that concatenate back to `text` exactly."""
    tokens = re.findall(r"\s*\S+\s*", text) or ([text] if text else [])
    return ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]


def _echo(prompt: str) -> Move:
    said = " ".join(prompt.split())
    said = said if len(said) <= 200 else said[:197] + "..."
    return Move(
        text=f'{LABEL} You said: "{said}". I am the scripted demo model: I only play the '
        "incident-triage story (ask me to investigate the pages) and echo the rest."
    )


def _is_prompt(message: dict[str, Any]) -> bool:
    blocks = _blocks(message)
    return message.get("role") == "user" and not any(b.get("type") == "tool_result" for b in blocks)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _call(block: dict[str, Any], results: dict[str, tuple[str, bool]]) -> Call:
    result = results.get(str(block.get("id")))
    tool_input = block.get("input")
    return Call(
        name=str(block.get("name")),
        input=tool_input if isinstance(tool_input, dict) else {},
        result=result[0] if result else None,
        is_error=result[1] if result else False,
    )


def _usage(request: ModelRequest, content: list[dict[str, Any]]) -> ModelUsage:
    prompt = json.dumps([request.system, request.messages, request.tools], default=str)
    return ModelUsage(
        input_tokens=max(1, len(prompt) // 4), output_tokens=max(1, len(json.dumps(content)) // 4)
    )
