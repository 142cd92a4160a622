"""Event bodies for brain tests, built with the brain's own constructors where it has one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from corral.brain import events as ev
from corral.brain.state import SessionState, fold
from corral.models.base import ModelUsage

Body = dict[str, Any]


def msg(text: str = "hi") -> Body:
    return ev.event("user.message", content=[{"type": "text", "text": text}])


def interrupt() -> Body:
    return ev.event("user.interrupt")


def use(call_id: str, permission: str = "allow", name: str = "bash") -> Body:
    return ev.event(
        "agent.tool_use",
        id=call_id,
        name=name,
        input={"command": f"echo {call_id}"},
        evaluated_permission=permission,
    )


def custom(call_id: str) -> Body:
    return ev.event("agent.custom_tool_use", id=call_id, name="lookup", input={"key": call_id})


def result(call_id: str, text: str = "ok", *, is_error: bool = False) -> Body:
    return ev.tool_result(call_id, ev.text_content(text), is_error=is_error)


def custom_result(call_id: str, text: str = "ok") -> Body:
    return ev.event(
        "user.custom_tool_result", custom_tool_use_id=call_id, content=ev.text_content(text)
    )


def confirm(call_id: str, verdict: str = "allow") -> Body:
    return ev.event("user.tool_confirmation", tool_use_id=call_id, result=verdict)


def started(call_id: str) -> Body:
    return ev.tool_started(call_id)


def fmt() -> Body:
    return ev.log_format()


def running() -> Body:
    return ev.event("session.status_running")


def idle(stop: str = "end_turn", *ids: str) -> Body:
    return ev.status_idle(stop, ids)  # type: ignore[arg-type]


def rescheduled() -> Body:
    return ev.event("session.status_rescheduled")


def span(start_id: str) -> Body:
    return ev.event("span.model_request_start", id=start_id)


def span_end(start_id: str, *, is_error: bool = False) -> Body:
    return ev.span_end(start_id, ModelUsage(), is_error=is_error)


def said(text: str) -> Body:
    return ev.event("agent.message", content=[{"type": "text", "text": text}])


def error(retry: str) -> Body:
    return ev.session_error("model_overloaded_error", "busy", retry)  # type: ignore[arg-type]


def folded(bodies: Iterable[Body]) -> SessionState:
    """The state of a log given as bodies (seq 1, 2, …)."""
    return fold(enumerate(bodies, start=1))
