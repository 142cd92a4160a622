"""Scripts for the fake model server: the turns it answers and the handlers that choose them.

Plain values and thread-safe handlers only; no HTTP here and no import of corral.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Text:
    """A text block."""

    text: str


@dataclass(frozen=True, slots=True)
class Thinking:
    """A thinking block (streamed as thinking_delta chunks, then one signature_delta)."""

    thinking: str
    signature: str = "fake-signature"


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call; `id` is generated (toolu_… / call_…) when None."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


Block = Text | Thinking | ToolUse


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token counts reported for a turn."""

    input_tokens: int = 10
    output_tokens: int = 5
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Turn:
    """One successful model answer."""

    blocks: Sequence[Block]
    _: KW_ONLY
    stop_reason: str | None = None
    """Anthropic stop reason; None derives `tool_use` if any ToolUse else `end_turn`."""
    usage: Usage = field(default_factory=Usage)
    first_token_delay: float = 0.0
    """Seconds between `message_start` (headers sent) and the first content block."""
    chunk_delay: float = 0.0
    """Seconds between two deltas."""
    chunk_size: int = 16
    """Characters per text/thinking/JSON delta."""

    @property
    def final_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorReply:
    """An error answer: an HTTP error status, or (mid_stream) a 200 stream cut by an error event."""

    status: int = 529
    type: str | None = None
    """Anthropic error type; None derives it from `status` (529 -> overloaded_error, …)."""
    message: str | None = None
    mid_stream: bool = False
    drop: bool = False
    """With `mid_stream`: end the stream early with no error event, like a dropped connection."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent with an error status: `retry-after`, rate-limit reset headers and the like."""

    @property
    def error_type(self) -> str:
        return self.type or _ERROR_TYPES.get(self.status, "api_error")

    @property
    def error_message(self) -> str:
        return self.message or f"fake {self.error_type}"


Reply = Turn | ErrorReply
Handler = Callable[[dict[str, Any]], Reply]
"""Called on the server's event loop with each request body; must return quickly."""


class ScriptedTurns:
    """A handler answering with `replies` in order (thread-safe).

    When the script runs out it answers a 400 "fake script exhausted" (not retryable, so a test
    fails fast) unless `repeat_last` is set.
    """

    def __init__(self, replies: Iterable[Reply], *, repeat_last: bool = False) -> None:
        self._replies = list(replies)
        self._repeat_last = repeat_last
        self._next = 0
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            if self._next < len(self._replies):
                self._next += 1
                return self._replies[self._next - 1]
            if self._repeat_last and self._replies:
                return self._replies[-1]
        return ErrorReply(status=400, message="fake script exhausted")

    @property
    def served(self) -> int:
        """How many scripted replies were handed out."""
        with self._lock:
            return self._next


def first_user_text(request: dict[str, Any]) -> str:
    """The text of the first user message, for Anthropic and OpenAI request shapes alike."""
    for message in request.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        return ""
    return ""


def by_marker(scripts: Mapping[str, Sequence[Reply] | Handler]) -> Handler:
    """A handler that picks a script by a marker string found in the first user message.

    Lets concurrent sessions in one test follow different scripts. The longest matching marker
    wins; a request with no marker gets a 400.
    """
    handlers: dict[str, Handler] = {
        marker: script if callable(script) else ScriptedTurns(script)
        for marker, script in scripts.items()
    }
    markers = sorted(handlers, key=len, reverse=True)

    def handle(request: dict[str, Any]) -> Reply:
        text = first_user_text(request)
        for marker in markers:
            if marker in text:
                return handlers[marker](request)
        return ErrorReply(status=400, message=f"fake: no script marker in {text[:80]!r}")

    return handle


def system_text(request: dict[str, Any]) -> str:
    """The system prompt of an Anthropic request (a string or text blocks)."""
    system = request.get("system")
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return ""


def by_system(scripts: Mapping[str, Handler]) -> Handler:
    """A handler that picks a script by a marker in the request's system prompt, so each agent
    of a multi-agent session (each thread runs its own agent) follows its own script.
    A request with no marker gets a 400."""

    def handle(request: dict[str, Any]) -> Reply:
        text = system_text(request)
        for marker, handler in scripts.items():
            if marker in text:
                return handler(request)
        return ErrorReply(status=400, message=f"fake: no system marker in {text[:80]!r}")

    return handle


def reply_from_json(data: dict[str, Any]) -> Reply:
    """Build a reply from JSON: `{"error": {...ErrorReply fields}}` or Turn fields with blocks
    as `{"type": "text"|"thinking"|"tool_use", ...}`."""
    if "error" in data:
        return ErrorReply(**data["error"])
    blocks: list[Block] = []
    for raw in data.get("blocks", []):
        fields = {k: v for k, v in raw.items() if k != "type"}
        kind = raw.get("type")
        if kind == "text":
            blocks.append(Text(**fields))
        elif kind == "thinking":
            blocks.append(Thinking(**fields))
        elif kind == "tool_use":
            blocks.append(ToolUse(**fields))
        else:
            raise ValueError(f"unknown block type {kind!r}")
    options = {k: v for k, v in data.items() if k not in ("blocks", "usage")}
    return Turn(blocks, usage=Usage(**data.get("usage", {})), **options)
