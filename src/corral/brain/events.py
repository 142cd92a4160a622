"""Constructors for the events a brain appends (wire bodies); pure. `event` itself, typed per
event type, is generated (`event_builder.py`)."""

from __future__ import annotations

from typing import Any, Literal

from corral.brain.event_builder import UnknownEventField, event
from corral.models.base import ModelError, ModelUsage
from corral.wire.events import LOG_FORMAT_VERSION, StopType

__all__ = ["UnknownEventField", "event"]

_ERROR_TYPES = {
    "overloaded": "model_overloaded_error",
    "rate_limited": "model_rate_limited_error",
    "request_failed": "model_request_failed_error",
    "invalid_request": "model_request_failed_error",
    "authentication": "model_request_failed_error",
}


def status_idle(stop_type: StopType, event_ids: tuple[str, ...] = ()) -> dict[str, Any]:
    """`session.status_idle` with its stop reason."""
    reason: dict[str, Any] = {"type": stop_type}
    if stop_type == "requires_action":
        reason["event_ids"] = list(event_ids)
    return event("session.status_idle", stop_reason=reason)


def span_end(start_id: str, usage: ModelUsage, *, is_error: bool = False) -> dict[str, Any]:
    """`span.model_request_end` closing `start_id`."""
    return event(
        "span.model_request_end",
        model_request_start_id=start_id,
        is_error=is_error,
        model_usage={
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
        },
    )


def model_error(
    error: ModelError, retry_status: Literal["retrying", "exhausted"]
) -> dict[str, Any]:
    """`session.error` for a failed model call."""
    return session_error(_ERROR_TYPES[error.kind], error.message, retry_status)


def session_error(
    kind: str, message: str, retry_status: Literal["retrying", "exhausted"], **extra: Any
) -> dict[str, Any]:
    """`session.error` with the SDK's error object shape."""
    body = {"type": kind, "message": message, "retry_status": {"type": retry_status}, **extra}
    return event("session.error", error=body)


def tool_result(call_id: str, content: list[dict[str, Any]], *, is_error: bool) -> dict[str, Any]:
    """`agent.tool_result` for a server-executed built-in tool."""
    return event("agent.tool_result", tool_use_id=call_id, content=content, is_error=is_error)


def mcp_tool_result(
    call_id: str, content: list[dict[str, Any]], *, is_error: bool
) -> dict[str, Any]:
    """`agent.mcp_tool_result` for a call to an MCP server's tool."""
    return event(
        "agent.mcp_tool_result", mcp_tool_use_id=call_id, content=content, is_error=is_error
    )


def call_result(
    call_id: str, kind: str, content: list[dict[str, Any]], *, is_error: bool
) -> dict[str, Any]:
    """The result event a server-run call of `kind` ("builtin" or "mcp") is answered with."""
    if kind == "mcp":
        return mcp_tool_result(call_id, content, is_error=is_error)
    return tool_result(call_id, content, is_error=is_error)


def text_content(text: str) -> list[dict[str, Any]]:
    """A single text block."""
    return [{"type": "text", "text": text}]


def tool_started(call_id: str, server_tool: str | None = None) -> dict[str, Any]:
    """`corral.tool_started` (internal, never shown to clients): logged before the call runs.

    `server_tool` names a server-executed tool whose start counts in the session's
    `usage.server_tool_use` (the projection counts these markers: exactly the calls made)."""
    if server_tool is None:
        return event("corral.tool_started", tool_use_id=call_id)
    return event("corral.tool_started", tool_use_id=call_id, server_tool=server_tool)


def log_format() -> dict[str, Any]:
    """`corral.log_format` (internal): this log marks tool starts from here on."""
    return event("corral.log_format", version=LOG_FORMAT_VERSION)
