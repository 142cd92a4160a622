"""The Anthropic Messages API provider: one streamed `POST /v1/messages` per call.

It speaks the wire protocol itself rather than through the `anthropic` SDK (whose types cost
every server process about a second of CPU to import, for the dozen fields read here), over
`http_client.ModelHttpClient` (httpcore; see there why not httpx). Key, base URL and the
environment (for the proxy variables) are passed in: this module never reads `os.environ`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from corral.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ModelUsage,
    TextDelta,
    ThinkingStarted,
)
from corral.models.http_client import ModelHttpClient, Response, Stalled, TransportError
from corral.models.http_errors import connection_error, error_for_status, missing_key, stall_error
from corral.models.retry_after import requested_wait

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)
# The API refuses cache_control on these block types.
_UNCACHEABLE = frozenset({"thinking", "redacted_thinking"})
_MAX_ERROR_BODY = 64 * 1024


class AnthropicClient:
    """A `ModelClient` for the Anthropic Messages API (or anything speaking it)."""

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None = None,
        *,
        upstream_model: str | None = None,
        timeout: float = 120.0,
        api_key_name: str = "ANTHROPIC_API_KEY",
        env: Mapping[str, str] | None = None,
    ) -> None:
        """Create the client; a missing `api_key` fails on first use, naming `api_key_name`.

        Args:
            api_key: the API key, sent as `x-api-key` on every request.
            base_url: the API root (default https://api.anthropic.com).
            upstream_model: a model name sent instead of `request.model`.
            timeout: seconds the model may stay silent: to answer, and between two streamed
                chunks (`model_stall_timeout_seconds`).
            api_key_name: where the key should come from, for the missing-key message.
            env: the server's environment, for `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY`
                (None: no proxy).

        No retries here: the brain retries with backoff. A malformed `base_url` or a key
        holding a line break is a ValueError here, not a failure of the first call.
        """
        self._upstream_model = upstream_model
        self._api_key_name = api_key_name
        self._http: ModelHttpClient | None = None
        if api_key:
            headers = {
                "x-api-key": api_key,
                "anthropic-version": API_VERSION,
                "accept": "text/event-stream",
            }
            self._http = ModelHttpClient(
                base_url or DEFAULT_BASE_URL,
                headers,
                timeout=timeout,
                connect_timeout=min(timeout, 10.0),
                env=env or {},
            )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream one response; see `ModelClient.stream`."""
        http = self._http
        if http is None:
            raise missing_key(self._api_key_name, request.model)
        body = {**build_params(request, self._upstream_model), "stream": True}
        payload = json.dumps(body, separators=(",", ":")).encode()
        accumulator = _Accumulator()
        try:
            async with http.post("/v1/messages", payload) as response:
                if response.status >= 400:
                    raise await _status_error(response)
                async for event in _sse_events(response):
                    for preview in accumulator.feed(event):
                        yield preview
        except Stalled as exc:
            raise stall_error("anthropic", exc.seconds) from exc
        except TransportError as exc:
            raise connection_error("anthropic", str(exc)) from exc
        yield accumulator.response()

    async def aclose(self) -> None:
        """Release connections."""
        if self._http is not None:
            await self._http.aclose()


async def _status_error(response: Response) -> ModelError:
    """The `ModelError` for a refused request, from its `{"type": "error", "error": ...}` body."""
    raw = await response.read(_MAX_ERROR_BODY)
    error_type, message = None, raw[:500].decode(errors="replace") or response.reason
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict):
        error_type = error.get("type") if isinstance(error.get("type"), str) else None
        message = str(error.get("message") or message)
    wait = requested_wait(response.headers)
    return error_for_status("anthropic", response.status, error_type, message, retry_after=wait)


async def _sse_events(response: Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of a server-sent event stream (`data:` lines joined per event)."""
    data: list[str] = []
    async for line in response.lines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield _payload("\n".join(data))
            data = []
    if data:
        yield _payload("\n".join(data))


def _payload(text: str) -> dict[str, Any]:
    try:
        event = json.loads(text)
    except ValueError as exc:
        raise ModelError(
            "request_failed", f"anthropic: stream event is not JSON: {exc}", retryable=True
        ) from exc
    if not isinstance(event, dict):
        raise ModelError(
            "request_failed", "anthropic: stream event is not an object", retryable=True
        )
    return event


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
    """Folds raw stream events (as JSON objects) into previews and the final content blocks."""

    def __init__(self) -> None:
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, str] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None
        self._finished = False

    def feed(self, event: dict[str, Any]) -> list[ModelStreamEvent]:
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event["index"], event["delta"])
        if kind == "content_block_start":
            return self._start(event["index"], event["content_block"])
        if kind == "content_block_stop":
            self._stop(event["index"])
        elif kind == "message_start":
            self._add_usage(event["message"].get("usage"))
        elif kind == "message_delta":
            self._stop_reason = event.get("delta", {}).get("stop_reason")
            self._add_usage(event.get("usage"))
        elif kind == "message_stop":
            self._finished = True
        elif kind == "error":
            error = event.get("error") or {}
            raise error_for_status(
                "anthropic", None, error.get("type"), str(error.get("message", ""))
            )
        return []  # `ping` and event types added later are ignored, as the SDK does

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

    def _start(self, index: int, block: dict[str, Any]) -> list[ModelStreamEvent]:
        kind = block.get("type")
        if kind == "text":
            text = block.get("text", "")
            self._blocks[index] = {"type": "text", "text": text}
            return [TextDelta(index=index, text=text)] if text else []
        if kind == "tool_use":
            self._blocks[index] = {"type": "tool_use", "id": block["id"], "name": block["name"]}
            self._json[index] = ""
            return []
        if kind == "thinking":
            self._blocks[index] = {
                "type": "thinking",
                "thinking": block.get("thinking", ""),
                "signature": block.get("signature", ""),
            }
            return [ThinkingStarted(index=index)]
        self._blocks[index] = dict(block)
        if "input" in block:
            self._json[index] = ""
        return [ThinkingStarted(index=index)] if kind == "redacted_thinking" else []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[ModelStreamEvent]:
        block, kind = self._blocks[index], delta.get("type")
        if kind == "text_delta":
            block["text"] += delta["text"]
            return [TextDelta(index=index, text=delta["text"])]
        if kind == "input_json_delta":
            self._json[index] += delta["partial_json"]
        elif kind == "thinking_delta":
            block["thinking"] += delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])
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
        if not isinstance(usage, dict):
            return
        for name in _USAGE_FIELDS:
            value = usage.get(name)
            if isinstance(value, int):
                self._usage[name] = value
