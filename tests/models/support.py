"""Helpers shared by the provider tests."""

from __future__ import annotations

from typing import Any

from corral.models.base import ModelClient, ModelRequest, ModelResponse, ModelStreamEvent

TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "name": "bash",
        "description": "Run a command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
]


def make_request(text: str = "hello", **overrides: Any) -> ModelRequest:
    fields: dict[str, Any] = {
        "model": "claude-test",
        "system": "You are terse.",
        "messages": [{"role": "user", "content": text}],
        "tools": TOOLS,
    }
    fields.update(overrides)
    return ModelRequest(**fields)


async def drain(
    client: ModelClient, request: ModelRequest
) -> tuple[list[ModelStreamEvent], ModelResponse]:
    """All previews, and the final response (which must come last, exactly once)."""
    events = [event async for event in client.stream(request)]
    *previews, final = events
    assert isinstance(final, ModelResponse)
    assert not any(isinstance(e, ModelResponse) for e in previews)
    return previews, final
