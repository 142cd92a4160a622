"""Fold one appended event into the session's projections; pure, no I/O.

Two projections, both kept by the store backends inside the append's transaction so that they
never disagree with the log:

- `project`: the session row's summary (status, usage, stats);
- `CallBook.apply`: the tool calls a client may answer (`tool_calls` rows) and whether an
  interrupt is pending. Client events are validated against it, so a POST costs O(its own
  events) instead of a fold of the whole log. It mirrors `brain.state.fold` for what
  validation needs (which calls exist, their confirmation, answered or abandoned).

This module must not do I/O or know about HTTP errors: callers decide what a state means.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from corral.ids import parse_rfc3339
from corral.session.log import SessionSummary
from corral.wire.events import (
    AgentCustomToolUseEvent,
    AgentMcpToolResultEvent,
    AgentMcpToolUseEvent,
    AgentToolResultEvent,
    AgentToolUseEvent,
    LogEvent,
    SessionStatusIdleEvent,
    SessionStatusRescheduledEvent,
    SessionStatusRunningEvent,
    SessionStatusTerminatedEvent,
    UserCustomToolResultEvent,
    UserInterruptEvent,
    UserToolConfirmationEvent,
    UserToolResultEvent,
    parse_event,
)

_STATUS_BY_EVENT = {
    "session.status_running": "running",
    "session.status_idle": "idle",
    "session.status_rescheduled": "rescheduling",
    "session.status_terminated": "terminated",
}

_SUMMARY_EVENT_TYPES = frozenset(
    {*_STATUS_BY_EVENT, "span.model_request_end", "corral.model_cost", "corral.context_summary"}
)
"""The only events `project` changes a summary for."""

_SERVER_TOOL_COUNTERS = {"web_search": "web_search_requests"}
"""`corral.tool_started` markers with `server_tool` set count in `usage.server_tool_use`."""

LIST_COST_NANOS = "list_cost_nanos"
"""Key in a summary's usage of the exact list cost in nano-dollars (`corral.model_cost`
summed); the wire shows it as `list_cost` in cents (`service.sessions.render_session`)."""

_USAGE_KEYS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_input_tokens",
}


def project(summary: SessionSummary, event: dict[str, Any]) -> SessionSummary:
    """Apply `event` to `summary` in place and return it."""
    kind = event.get("type")
    if kind in _STATUS_BY_EVENT:
        _apply_status(summary, _STATUS_BY_EVENT[str(kind)], str(event.get("processed_at")))
    elif kind in ("span.model_request_end", "corral.context_summary"):  # a summary's request
        _add_usage(summary.usage, event.get("model_usage") or {})
    elif kind == "corral.model_cost":
        summary.usage[LIST_COST_NANOS] = int(summary.usage.get(LIST_COST_NANOS, 0)) + int(
            event.get("nanos", 0)
        )
    elif (counter := _server_tool_counter(event)) is not None:
        tools = summary.usage.setdefault("server_tool_use", {})
        tools[counter] = int(tools.get(counter, 0)) + 1
    return summary


def _server_tool_counter(event: dict[str, Any]) -> str | None:
    if event.get("type") != "corral.tool_started":
        return None
    return _SERVER_TOOL_COUNTERS.get(str(event.get("server_tool")))


def touches_summary(events: Sequence[dict[str, Any]]) -> bool:
    """Whether `project` would change a summary for any of `events` (else a store may keep the
    summary it has without decoding or re-encoding it)."""
    return any(
        event.get("type") in _SUMMARY_EVENT_TYPES or _server_tool_counter(event) is not None
        for event in events
    )


def _apply_status(summary: SessionSummary, status: str, at: str) -> None:
    if summary.status == status:
        return
    running_since = summary.stats.pop("running_since", None)
    if running_since is not None:
        elapsed = (parse_rfc3339(at) - parse_rfc3339(running_since)).total_seconds()
        total = float(summary.stats.get("active_seconds", 0.0)) + max(elapsed, 0.0)
        summary.stats["active_seconds"] = total
        summary.usage["active_seconds"] = total
    if status == "running":
        summary.stats["running_since"] = at
    summary.status = status


def _add_usage(usage: dict[str, Any], model_usage: dict[str, Any]) -> None:
    for source, target in _USAGE_KEYS.items():
        usage[target] = int(usage.get(target, 0)) + int(model_usage.get(source, 0) or 0)
    created = int(model_usage.get("cache_creation_input_tokens", 0) or 0)
    if created:
        cache = usage.setdefault("cache_creation", {})
        cache["ephemeral_5m_input_tokens"] = (
            int(cache.get("ephemeral_5m_input_tokens", 0)) + created
        )


# ---- tool calls -----------------------------------------------------------------------------

CallKind = Literal["builtin", "custom", "mcp"]
CallState = Literal["open", "answered", "abandoned"]

_ANSWER_KEYS = {
    "agent.tool_result": "tool_use_id",
    "user.tool_result": "tool_use_id",
    "user.custom_tool_result": "custom_tool_use_id",
    "agent.mcp_tool_result": "mcp_tool_use_id",
    "user.tool_confirmation": "tool_use_id",
}
"""Event types that answer (result) or confirm an existing call, and the field naming it."""
_CALL_EVENT_TYPES = frozenset(
    {
        *_ANSWER_KEYS,
        "agent.tool_use",
        "agent.custom_tool_use",
        "agent.mcp_tool_use",
        "user.interrupt",
        *_STATUS_BY_EVENT,
    }
)
"""The only events `CallBook.apply` parses; every other type leaves the book alone."""


@dataclass(slots=True)
class Call:
    """One tool use as validation sees it (a `tool_calls` row)."""

    event_id: str
    kind: CallKind
    permission: str
    """`evaluated_permission` of the use: allow, ask or deny (custom uses: allow)."""
    confirmation: str | None = None
    """allow / deny once the first `user.tool_confirmation` for it is logged."""
    state: CallState = "open"
    """answered: a result is logged; abandoned: its turn closed without one."""


@dataclass(slots=True)
class CallBook:
    """The slice of a session's call projection that one append reads and writes.

    A store loads the calls the append's events refer to (`referenced_calls`), applies each
    event in order, then writes back the `changed` calls, first abandoning every other open
    call of the session when `closed_turn` is set. The rules are `brain.state.apply`'s.
    """

    session_id: str
    status: str
    interrupt_pending: bool = False
    """A `user.interrupt` was logged after the last turn close: open calls will be abandoned."""
    calls: dict[str, Call] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    closed_turn: bool = False
    answered_here: dict[str, int] = field(default_factory=dict)
    """call id -> index, in this append, of the event that answered or confirmed it."""

    def apply(self, index: int, body: dict[str, Any]) -> None:
        """Fold the append's `index`-th event in.

        Raises:
            pydantic.ValidationError: a call-related event is malformed (a bug upstream; the
                brain could not fold it either).
        """
        if body.get("type") not in _CALL_EVENT_TYPES or body.get("session_thread_id"):
            return  # a child thread's cross-post or a routed answer's echo: not this log's
        event = parse_event(body)
        if not self._apply_call_event(index, event):
            self._apply_status_event(event)

    def _apply_call_event(self, index: int, event: LogEvent) -> bool:
        """Uses, results and confirmations; False for any other event."""
        match event:
            case AgentToolUseEvent():
                self._add(Call(event.id, "builtin", event.evaluated_permission))
            case AgentMcpToolUseEvent():
                self._add(Call(event.id, "mcp", event.evaluated_permission))
            case AgentCustomToolUseEvent():
                self._add(Call(event.id, "custom", "allow"))
            case AgentToolResultEvent() | UserToolResultEvent():
                self._answer(index, event.tool_use_id)
            case UserCustomToolResultEvent():
                self._answer(index, event.custom_tool_use_id)
            case AgentMcpToolResultEvent():
                self._answer(index, event.mcp_tool_use_id)
            case UserToolConfirmationEvent():
                self._confirm(index, event.tool_use_id, event.result)
            case _:
                return False
        return True

    def _apply_status_event(self, event: LogEvent) -> None:
        match event:
            case UserInterruptEvent():
                self.interrupt_pending = True
            case SessionStatusIdleEvent():
                self.status = "idle"
                if event.stop_reason.type != "requires_action":
                    self._close_turn()
            case SessionStatusTerminatedEvent():
                self.status = "terminated"
                self._close_turn()
            case SessionStatusRunningEvent():
                self.status = "running"
            case SessionStatusRescheduledEvent():
                self.status = "rescheduling"

    def _add(self, call: Call) -> None:
        self.calls[call.event_id] = call
        self.changed.add(call.event_id)

    def _answer(self, index: int, call_id: str) -> None:
        call = self.calls.get(call_id)
        if call is not None and call.state == "open":  # later results change nothing (fold)
            call.state = "answered"
            self.changed.add(call_id)
            self.answered_here[call_id] = index

    def _confirm(self, index: int, call_id: str, result: str) -> None:
        call = self.calls.get(call_id)
        if call is not None and call.confirmation is None:  # the first verdict counts (fold)
            call.confirmation = result
            self.changed.add(call_id)
            self.answered_here[call_id] = index

    def _close_turn(self) -> None:
        """A turn close drops a pending interrupt and abandons the calls still open, here and
        (through `closed_turn`) in the store."""
        self.interrupt_pending = False
        self.closed_turn = True
        for call_id, call in self.calls.items():
            if call.state == "open":
                call.state = "abandoned"
                self.changed.add(call_id)


def touches_calls(events: Sequence[dict[str, Any]]) -> bool:
    """Whether `CallBook.apply` would do anything with any of `events` (else a store may skip
    loading, folding and saving the book)."""
    return any(
        event.get("type") in _CALL_EVENT_TYPES and not event.get("session_thread_id")
        for event in events
    )


def referenced_calls(events: Sequence[dict[str, Any]]) -> list[str]:
    """Ids of existing calls that `events` answer or confirm (what a store must load)."""
    found: dict[str, None] = {}
    for event in events:
        key = _ANSWER_KEYS.get(str(event.get("type")))
        if key is not None and isinstance(event.get(key), str):
            found[event[key]] = None
    return list(found)
