"""The Anthropic Messages API provider, over the official `anthropic` SDK.

Key and base URL are passed in explicitly: this module never reads the environment, and it
never lets the SDK read it either.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx2
from anthropic.types import (
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawContentBlockStopEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RawMessageStreamEvent,
)

from corral.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ModelUsage,
    TextDelta,
    ThinkingStarted,
)
from corral.models.http_errors import connection_error, error_for_status

DEFAULT_BASE_URL = "https://api.anthropic.com"
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
# The API refuses cache_control on these block types.
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})


class AnthropicClient:
    """A `ModelClient` for the Anthropic Messages API (or anything speaking it)."""

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None = None,
        *,
        upstream_model: str | None = None,
        max_retries: int = 0,
        timeout: float = 600.0,
        api_key_name: str = "ANTHROPIC_API_KEY",
        pool_size: int = 4,
    ) -> None:
        """Create the client; a missing `api_key` fails on first use, naming `api_key_name`.

        Args:
            api_key: the API key (the SDK sends it on every request).
            base_url: the API root (default https://api.anthropic.com).
            upstream_model: a model name sent instead of `request.model`.
            max_retries: SDK-level retries; 0 because the brain retries with backoff.
            timeout: seconds allowed for the request and between two streamed chunks.
            api_key_name: where the key should come from, for the missing-key message.
            pool_size: SDK clients to spread concurrent streams over; one httpx pool's
                bookkeeping grows with its connection count, so a few smaller pools stream
                200 concurrent responses markedly faster than one big one.
        """
        self._upstream_model = upstream_model
        self._api_key_name = api_key_name
        self._sdks: list[anthropic.AsyncAnthropic] = []
        self._in_flight: list[int] = []
        if api_key:
            self._sdks = [
                anthropic.AsyncAnthropic(
                    api_key=api_key,
                    base_url=base_url or DEFAULT_BASE_URL,
                    max_retries=max_retries,
                    timeout=anthropic.Timeout(timeout, connect=min(timeout, 10.0)),
                )
                for _ in range(max(pool_size, 1))
            ]
            self._in_flight = [0] * len(self._sdks)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream one response; see `ModelClient.stream`."""
        slot = self._least_busy()
        sdk = self._sdks[slot]
        params = build_params(request, self._upstream_model)
        accumulator = _Accumulator()
        self._in_flight[slot] += 1
        try:
            events = await sdk.messages.create(**params, stream=True)
            async with events:
                async for event in events:
                    for preview in accumulator.feed(event):
                        yield preview
        except anthropic.APIStatusError as exc:
            status = exc.status_code if exc.status_code >= 400 else None
            message = exc.api_message or exc.message
            raise error_for_status("anthropic", status, exc.type, message) from exc
        except anthropic.APIConnectionError as exc:
            raise connection_error("anthropic", exc.message) from exc
        except httpx2.TransportError as exc:
            # A connection dropped mid-stream surfaces from the SDK as a bare transport error.
            raise connection_error("anthropic", repr(exc)) from exc
        except anthropic.APIError as exc:
            raise ModelError("request_failed", f"anthropic: {exc.message}", retryable=True) from exc
        finally:
            self._in_flight[slot] -= 1
        yield accumulator.response()

    async def aclose(self) -> None:
        """Release connections."""
        for sdk in self._sdks:
            await sdk.close()

    def _least_busy(self) -> int:
        if not self._sdks:
            raise ModelError(
                "authentication",
                f"no Anthropic API key: set {self._api_key_name} in the server's environment",
                retryable=False,
            )
        return min(range(len(self._sdks)), key=self._in_flight.__getitem__)


def build_params(request: ModelRequest, upstream_model: str | None = None) -> dict[str, Any]:
    """The `messages.create` arguments for `request`, with prompt-cache breakpoints if asked.

    Breakpoints go on the last tool, the system prompt and the last cacheable block of the last
    message; the request itself is never mutated.
    """
    params: dict[str, Any] = {
        "model": upstream_model or request.model,
        "max_tokens": request.max_tokens,
        "messages": request.messages,
    }
    if request.tools:
        params["tools"] = request.tools
    if request.system:
        params["system"] = request.system
    if not request.cache_breakpoints:
        return params
    if request.tools:
        params["tools"] = [*request.tools[:-1], _cached(request.tools[-1])]
    if request.system:
        params["system"] = [_cached({"type": "text", "text": request.system})]
    if request.messages:
        params["messages"] = [*request.messages[:-1], _cache_last_block(request.messages[-1])]
    return params


def _cached(block: dict[str, Any]) -> dict[str, Any]:
    return {**block, "cache_control": {"type": "ephemeral"}}


def _cache_last_block(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, str):
        return {**message, "content": [_cached({"type": "text", "text": content})]}
    if not isinstance(content, list):
        return message
    for i in range(len(content) - 1, -1, -1):
        if content[i].get("type") not in _UNCACHEABLE:
            return {**message, "content": [*content[:i], _cached(content[i]), *content[i + 1 :]]}
    return message


class _Accumulator:
    """Folds raw stream events into previews and the final content blocks."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._finished = False

    def feed(self, event: RawMessageStreamEvent) -> list[ModelStreamEvent]:
        if isinstance(event, RawContentBlockDeltaEvent):
            return self._delta(event)
        if isinstance(event, RawContentBlockStartEvent):
            return self._start(event)
        if isinstance(event, RawContentBlockStopEvent):
            self._stop(event.index)
        elif isinstance(event, RawMessageStartEvent):
            self._add_usage(event.message.usage)
        elif isinstance(event, RawMessageDeltaEvent):
            self._stop_reason = event.delta.stop_reason
            self._add_usage(event.usage)
        elif isinstance(event, RawMessageStopEvent):
            self._finished = True
        return []

    def response(self) -> ModelResponse:
        if not self._finished:
            raise ModelError(
                "request_failed", "anthropic: stream ended before message_stop", retryable=True
            )
        return ModelResponse(
            content=[self._blocks[i] for i in sorted(self._blocks)],
            stop_reason=self._stop_reason or "end_turn",
            usage=ModelUsage(**self._usage),
        )

    def _start(self, event: RawContentBlockStartEvent) -> list[ModelStreamEvent]:
        index, block = event.index, event.content_block
        if block.type == "text":
            self._blocks[index] = {"type": "text", "text": block.text}
            return [TextDelta(index=index, text=block.text)] if block.text else []
        if block.type == "tool_use":
            self._blocks[index] = {"type": "tool_use", "id": block.id, "name": block.name}
            self._json[index] = ""
            return []
        if block.type == "thinking":
            self._blocks[index] = {
                "type": "thinking",
                "thinking": block.thinking,
                "signature": block.signature,
            }
            return [ThinkingStarted(index=index)]
        self._blocks[index] = block.to_dict()
        if "input" in self._blocks[index]:
            self._json[index] = ""
        return [ThinkingStarted(index=index)] if block.type == "redacted_thinking" else []

    def _delta(self, event: RawContentBlockDeltaEvent) -> list[ModelStreamEvent]:
        index, delta, block = event.index, event.delta, self._blocks[event.index]
        if delta.type == "text_delta":
            block["text"] += delta.text
            return [TextDelta(index=index, text=delta.text)]
        if delta.type == "input_json_delta":
            self._json[index] += delta.partial_json
        elif delta.type == "thinking_delta":
            block["thinking"] += delta.thinking
        elif delta.type == "signature_delta":
            block["signature"] = delta.signature
        elif delta.type == "citations_delta":
            block.setdefault("citations", []).append(delta.citation.to_dict())
        return []

    def _stop(self, index: int) -> None:
        if index not in self._json:
            return
        raw = self._json.pop(index)
        try:
            self._blocks[index]["input"] = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise ModelError(
                "request_failed", f"anthropic: tool input is not JSON: {exc}", retryable=True
            ) from exc

    def _add_usage(self, usage: Any) -> None:
        for name in _USAGE_FIELDS:
            value = getattr(usage, name, None)
            if value is not None:
                self._usage[name] = value
