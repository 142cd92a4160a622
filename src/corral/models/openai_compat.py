"""A provider for OpenAI-compatible chat servers (vLLM, Ollama, llama.cpp) via the `openai` SDK.

It translates our Anthropic-shaped request to chat completions and the streamed answer back to
Anthropic content blocks. It reads no environment: key and base URL are passed in.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import ChoiceDelta, ChoiceDeltaToolCall
from openai.types.completion_usage import CompletionUsage

from corral.models.base import (
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ModelUsage,
    TextDelta,
    ThinkingStarted,
)
from corral.models.http_errors import connection_error, error_for_status, missing_key, stall_error
from corral.models.retry_after import requested_wait

_PLACEHOLDER_KEY = "none"  # local servers ignore the key, but the SDK insists on one


class OpenAICompatClient:
    """A `ModelClient` for a server speaking OpenAI chat completions."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        upstream_model: str | None = None,
        max_retries: int = 0,
        timeout: float = 120.0,
        api_key_name: str | None = None,
    ) -> None:
        """Create the client.

        Args:
            base_url: the API root including `/v1` (e.g. http://localhost:11434/v1).
            api_key: the bearer key; None sends a placeholder (local servers need none)
                unless `api_key_name` says one was configured, which then fails on first use.
            upstream_model: a model name sent instead of `request.model`.
            max_retries: SDK-level retries; 0 because the brain retries with backoff.
            timeout: seconds the model may stay silent: to answer, and between two streamed
                chunks (`model_stall_timeout_seconds`).
            api_key_name: the environment variable the key was meant to come from.
        """
        self._upstream_model = upstream_model
        self._timeout = timeout
        self._missing_key = api_key_name if api_key is None else None
        self._sdk = openai.AsyncOpenAI(
            api_key=api_key or _PLACEHOLDER_KEY,
            base_url=base_url,
            max_retries=max_retries,
            timeout=openai.Timeout(timeout, connect=min(timeout, 10.0)),
        )
        # The SDK fills these from OPENAI_* variables; they must not leak to a third-party server.
        self._sdk.organization = None
        self._sdk.project = None
        self._sdk.admin_api_key = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream one response; see `ModelClient.stream`."""
        if self._missing_key is not None:
            raise missing_key(self._missing_key, request.model)
        accumulator = _ChatAccumulator()
        try:
            chunks = await self._sdk.chat.completions.create(
                model=self._upstream_model or request.model,
                messages=cast(Any, to_chat_messages(request.system, request.messages)),
                tools=cast(Any, [to_chat_tool(t) for t in request.tools]) or openai.omit,
                max_tokens=request.max_tokens,
                stream=True,
                stream_options={"include_usage": True},
            )
            async with chunks:
                async for chunk in chunks:
                    for preview in accumulator.feed(chunk):
                        yield preview
        except openai.APIStatusError as exc:
            wait = requested_wait({k.lower(): v for k, v in exc.response.headers.items()})
            raise error_for_status(
                "openai", exc.status_code, exc.type, _message(exc), retry_after=wait
            ) from exc
        except openai.APITimeoutError as exc:
            if isinstance(exc.__cause__, httpx2.ConnectTimeout):
                raise connection_error("openai", "connecting timed out") from exc
            raise stall_error("openai", self._timeout) from exc
        except openai.APIConnectionError as exc:
            raise connection_error("openai", exc.message) from exc
        except openai.APIError as exc:
            # An error object inside a 200 stream; vLLM puts the HTTP status in `code`.
            status = int(exc.code) if exc.code and exc.code.isdigit() else None
            raise error_for_status("openai", status, exc.type, _message(exc)) from exc
        except httpx2.ReadTimeout as exc:  # mid-stream: the SDK wraps only the request
            raise stall_error("openai", self._timeout) from exc
        except httpx2.TransportError as exc:
            raise connection_error("openai", repr(exc)) from exc
        yield accumulator.response()

    async def aclose(self) -> None:
        """Release connections."""
        await self._sdk.close()


def _message(exc: openai.APIError) -> str:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return exc.message


def to_chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic tool definition as an OpenAI function tool."""
    function = {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
    }
    return {"type": "function", "function": function}


def to_chat_messages(system: str | None, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic `system` + `messages` as OpenAI chat messages.

    Thinking blocks are dropped (chat servers cannot take them back); tool results become
    `tool` messages placed before the user's text, right after the assistant's tool calls.
    """
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        blocks = _blocks(message.get("content"))
        out += [_assistant(blocks)] if message.get("role") == "assistant" else _user(blocks)
    return out


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content or [])


def _assistant(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    text = "".join(b["text"] for b in blocks if b.get("type") == "text")
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "tool_result":
            result = _tool_result_text(block)
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": result})
        elif kind == "text":
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and (url := _image_url(block.get("source", {}))):
            parts.append({"type": "image_url", "image_url": {"url": url}})
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        content = "\n\n".join(p["text"] for p in parts) if only_text else parts
        out.append({"role": "user", "content": content})
    return out


def _tool_result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    if not isinstance(content, str):
        content = "\n".join(b.get("text", "") for b in content if b.get("type") == "text")
    # Chat tool messages have no error flag, so the model learns it from the text.
    return f"Error: {content}" if block.get("is_error") else content


def _image_url(source: dict[str, Any]) -> str | None:
    if source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if source.get("type") == "url":
        return str(source.get("url"))
    return None


class _ChatAccumulator:
    """Folds chat completion chunks into previews and Anthropic content blocks."""

    def __init__(self) -> None:
        self._blocks: list[dict[str, Any]] = []
        self._calls: dict[int, int] = {}
        self._args: dict[int, str] = {}
        self._finish: str | None = None
        self._usage = ModelUsage()

    def feed(self, chunk: ChatCompletionChunk) -> list[ModelStreamEvent]:
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        out: list[ModelStreamEvent] = []
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            delta = choice.delta
            if reasoning := _reasoning(delta):
                out += self._append("thinking", reasoning)
            if delta.content:
                out += self._append("text", delta.content)
            for call in delta.tool_calls or []:
                self._tool_delta(call)
            self._finish = choice.finish_reason or self._finish
        return out

    def response(self) -> ModelResponse:
        if self._finish is None:
            raise ModelError(
                "request_failed", "openai: stream ended without a finish_reason", retryable=True
            )
        for index, raw in self._args.items():
            self._blocks[index]["input"] = _parse_arguments(raw)
        has_tools = bool(self._calls)
        return ModelResponse(
            content=self._blocks,
            stop_reason=_stop_reason(self._finish, has_tools),
            usage=self._usage,
        )

    def _append(self, kind: str, text: str) -> list[ModelStreamEvent]:
        opened = not self._blocks or self._blocks[-1]["type"] != kind
        if opened:
            empty = {"type": "text", "text": ""} if kind == "text" else _empty_thinking()
            self._blocks.append(empty)
        index = len(self._blocks) - 1
        self._blocks[index][kind] += text
        if kind == "text":
            return [TextDelta(index=index, text=text)]
        return [ThinkingStarted(index=index)] if opened else []

    def _tool_delta(self, call: ChoiceDeltaToolCall) -> None:
        index = self._calls.get(call.index)
        # Some servers send each complete call under the same index; a new id means a new call.
        if index is None or (call.id and call.id != self._blocks[index]["id"]):
            call_id = call.id or f"call_{uuid.uuid4().hex[:24]}"
            self._blocks.append({"type": "tool_use", "id": call_id, "name": ""})
            index = self._calls[call.index] = len(self._blocks) - 1
            self._args[index] = ""
        if call.function is not None:
            if call.function.name and not self._blocks[index]["name"]:
                self._blocks[index]["name"] = call.function.name
            self._args[index] += call.function.arguments or ""


def _reasoning(delta: ChoiceDelta) -> str:
    # vLLM streams reasoning as `reasoning_content`, Ollama as `reasoning`; neither is typed.
    value = getattr(delta, "reasoning_content", None) or getattr(delta, "reasoning", None)
    return value if isinstance(value, str) else ""


def _empty_thinking() -> dict[str, Any]:
    return {"type": "thinking", "thinking": "", "signature": ""}


def _parse_arguments(raw: str) -> dict[str, Any]:
    """Tool arguments as an object; local models sometimes emit broken JSON, which is kept
    whole under `_raw_arguments` so the tool's validation error shows the model what it sent."""
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return {"_raw_arguments": raw}
    return parsed if isinstance(parsed, dict) else {"_raw_arguments": raw}


def _stop_reason(finish: str, has_tools: bool) -> str:
    if finish == "length":
        return "max_tokens"
    # Ollama reports "stop" even when it called tools.
    if has_tools or finish in ("tool_calls", "function_call"):
        return "tool_use"
    if finish == "content_filter":
        return "refusal"
    return "end_turn"


def _usage(usage: CompletionUsage) -> ModelUsage:
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return ModelUsage(
        input_tokens=max(usage.prompt_tokens - cached, 0),
        output_tokens=usage.completion_tokens,
        cache_read_input_tokens=cached,
    )
