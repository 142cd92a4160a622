"""Fold a session's log into the state the brain decides on; pure, no I/O.

The log is the only input: a fresh brain after a crash folds the same events into the same
state, which is what makes recovery a pure function of the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

CallKind = Literal["builtin", "custom", "mcp"]
_USE_TYPES: dict[str, CallKind] = {
    "agent.tool_use": "builtin",
    "agent.custom_tool_use": "custom",
    "agent.mcp_tool_use": "mcp",
}
_RESULT_KEYS = {
    "agent.tool_result": "tool_use_id",
    "user.tool_result": "tool_use_id",
    "user.custom_tool_result": "custom_tool_use_id",
    "agent.mcp_tool_result": "mcp_tool_use_id",
}
_INPUT_TYPES = frozenset({"user.message", "system.message"})


@dataclass(slots=True)
class ToolCall:
    """One tool use and what became of it."""

    event_id: str
    kind: CallKind
    name: str
    input: dict[str, Any]
    permission: str
    seq: int
    result_seq: int | None = None
    confirmation: str | None = None
    deny_message: str | None = None
    confirmed_seq: int | None = None
    abandoned: bool = False

    @property
    def resolved(self) -> bool:
        """It has a result, or was abandoned by an interrupt."""
        return self.result_seq is not None or self.abandoned

    @property
    def awaiting_client(self) -> bool:
        """The client owes us a result or a confirmation."""
        if self.resolved:
            return False
        if self.kind == "custom":
            return True
        return self.permission == "ask" and self.confirmation is None


@dataclass(slots=True)
class SessionState:
    """What the brain needs to decide its next step."""

    status: str = "idle"
    last_seq: int = 0
    calls: dict[str, ToolCall] = field(default_factory=dict)
    last_input_seq: int = 0
    """Seq of the newest event the model has not yet answered (message or tool result)."""
    last_answer_seq: int = 0
    """Seq of the newest completed model response or turn close."""
    last_running_seq: int = 0
    last_status_seq: int = 0
    waiting_on: tuple[str, ...] | None = None
    """event_ids of the newest `requires_action` idle, if that is the current status."""
    interrupt_seq: int = 0
    model_requests: int = 0
    request_starts: dict[str, int] = field(default_factory=dict)
    """span.model_request_start id -> seq: a response answers what was logged before it."""

    @property
    def interrupt_pending(self) -> bool:
        """A `user.interrupt` arrived after the brain last settled the status."""
        return self.interrupt_seq > self.last_status_seq

    def unresolved(self) -> list[ToolCall]:
        """Calls without a result, in log order."""
        return [c for c in self.calls.values() if not c.resolved]


def fold(events: Iterable[tuple[int, dict[str, Any]]]) -> SessionState:
    """Build the state from `(seq, body)` pairs in log order."""
    state = SessionState()
    for seq, body in events:
        _apply(state, seq, body)
    return state


def _apply(state: SessionState, seq: int, body: dict[str, Any]) -> None:
    kind = str(body.get("type"))
    state.last_seq = seq
    if kind in _USE_TYPES:
        state.calls[str(body["id"])] = ToolCall(
            event_id=str(body["id"]),
            kind=_USE_TYPES[kind],
            name=str(body.get("name")),
            input=dict(body.get("input") or {}),
            permission=str(body.get("evaluated_permission") or "allow"),
            seq=seq,
        )
    elif kind in _RESULT_KEYS:
        _apply_result(state, seq, str(body.get(_RESULT_KEYS[kind])))
    elif kind == "user.tool_confirmation":
        call = state.calls.get(str(body.get("tool_use_id")))
        if call is not None and call.confirmation is None:
            call.confirmation = str(body.get("result"))
            call.deny_message = body.get("deny_message")
            call.confirmed_seq = seq
    elif kind in _INPUT_TYPES:
        state.last_input_seq = seq
    elif kind == "user.interrupt":
        state.interrupt_seq = seq
    elif kind == "span.model_request_start":
        state.request_starts[str(body["id"])] = seq
    elif kind == "span.model_request_end":
        state.model_requests += 1
        if not body.get("is_error"):
            # Input logged while the model was streaming was not in its request: only what
            # preceded the request's start counts as answered.
            started = state.request_starts.get(str(body.get("model_request_start_id")), seq)
            state.last_answer_seq = max(state.last_answer_seq, started)
    elif kind.startswith("session.status_"):
        _apply_status(state, seq, kind, body)


def _apply_result(state: SessionState, seq: int, use_id: str) -> None:
    call = state.calls.get(use_id)
    if call is not None and call.result_seq is None:
        call.result_seq = seq
        state.last_input_seq = seq


def _apply_status(state: SessionState, seq: int, kind: str, body: dict[str, Any]) -> None:
    state.last_status_seq = seq
    state.waiting_on = None
    if kind == "session.status_running":
        state.status = "running"
        state.last_running_seq = seq
    elif kind == "session.status_idle":
        state.status = "idle"
        reason = body.get("stop_reason") or {}
        if reason.get("type") == "requires_action":
            state.waiting_on = tuple(reason.get("event_ids") or ())
        else:
            # A closed turn: earlier inputs are answered, open calls are abandoned.
            state.last_answer_seq = seq
            for call in state.calls.values():
                if not call.resolved:
                    call.abandoned = True
    elif kind == "session.status_rescheduled":
        state.status = "rescheduling"
    elif kind == "session.status_terminated":
        state.status = "terminated"
