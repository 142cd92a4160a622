"""The state the brain decides on, built by applying a session's log one event at a time.

`apply(state, seq, event)` is pure (no I/O) and folds exactly one event, so a brain keeps a
state and applies only what is new; `fold(events)` is the same reduction over a whole log. A
fresh brain after a crash folds the same events into the same state: recovery is a pure
function of the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from corral.brain.threads import ThreadState, apply_thread
from corral.brain.window import ContextMeter
from corral.pricing import NANOS_PER_CENT
from corral.wire.events import (
    AgentCustomToolUseEvent,
    AgentMcpToolResultEvent,
    AgentMcpToolUseEvent,
    AgentToolResultEvent,
    AgentToolUseEvent,
    BudgetSetEvent,
    ContextSummaryEvent,
    HandsRemoteEvent,
    LogEvent,
    LogFormatEvent,
    ModelCostEvent,
    SessionErrorEvent,
    SessionStatusIdleEvent,
    SessionStatusRescheduledEvent,
    SessionStatusRunningEvent,
    SessionStatusTerminatedEvent,
    SessionUpdatedEvent,
    SpanModelRequestEndEvent,
    SpanModelRequestStartEvent,
    SystemMessageEvent,
    ToolStartedEvent,
    UserCustomToolResultEvent,
    UserInterruptEvent,
    UserMessageEvent,
    UserToolConfirmationEvent,
    UserToolResultEvent,
    WorkerLostEvent,
    parse_event,
)

CallKind = Literal["builtin", "custom", "mcp"]
TURN_CONTINUES_ERRORS = frozenset(
    {"mcp_connection_failed_error", "mcp_authentication_failed_error"}
    | {  # a repository could not be cloned: the session goes on without it
        f"repository_{kind}_error"
        for kind in ("authentication", "forbidden", "not_found", "checkout", "clone")
    }
)
"""`session.error` types that report a failure the turn carries on past (not a model failure)."""
Status = Literal["idle", "running", "rescheduling", "terminated"]
ToolUse = AgentToolUseEvent | AgentCustomToolUseEvent | AgentMcpToolUseEvent


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
    started_seq: int | None = None
    """Seq of its `corral.tool_started` marker: from then on it may have run."""
    abandoned: bool = False
    server: str = ""
    """The MCP server's name (`kind == "mcp"` only)."""
    legacy: bool = False
    """Logged by a brain that wrote no start markers (before `corral.log_format`)."""
    remote: bool = False
    """A built-in call of a self-hosted session: its worker runs it and posts the result."""

    @property
    def resolved(self) -> bool:
        """It has a result, or was abandoned when its turn closed."""
        return self.result_seq is not None or self.abandoned

    @property
    def awaiting_client(self) -> bool:
        """The client owes us a result or a confirmation."""
        if self.resolved:
            return False
        if self.kind == "custom":
            return True
        if self.remote:
            return self.confirmation != "deny"  # the worker's result (after any confirmation)
        return self.permission == "ask" and self.confirmation is None


@dataclass(slots=True)
class TurnTally:
    """What the log says of one turn, for its log line and metrics (`brain/telemetry.py`):
    folded here so that closing a turn costs no read of the log."""

    started_at: str | None = None
    """`processed_at` of the turn's first event (any event after the previous close)."""
    model_requests: int = 0
    """Its `span.model_request_end`s."""
    usage: dict[str, int] = field(default_factory=dict)
    """Their `model_usage`, summed."""


@dataclass(slots=True)
class SessionState:
    """What the brain needs to decide its next step."""

    status: Status = "idle"
    last_seq: int = 0
    calls: dict[str, ToolCall] = field(default_factory=dict)
    open: dict[str, ToolCall] = field(default_factory=dict)
    """The unresolved calls, in log order (kept apart so a step never scans every call)."""
    last_input_seq: int = 0
    """Seq of the newest input the model should see (message, or tool result of this turn)."""
    last_answer_seq: int = 0
    """Inputs up to here need no model call: answered, or dropped by an interrupt or failure."""
    last_running_seq: int = 0
    last_close_seq: int = 0
    """Seq of the last turn close: an idle other than `requires_action`, or termination."""
    waiting_on: tuple[str, ...] | None = None
    """event_ids of the newest `requires_action` idle, if that is the current status."""
    interrupt_seq: int = 0
    model_requests: int = 0
    model_retries: int = 0
    """Retryable model failures in a row in this turn (the next call is attempt N)."""
    retry_since: str | None = None
    """`processed_at` of the first of those failures: the retries' time bound runs from it."""
    request_starts: dict[str, int] = field(default_factory=dict)
    """Open span.model_request_start id -> seq: a response answers what was logged before it."""
    format_seq: int = 0
    """Seq of `corral.log_format` (0: only older brains have written to this log)."""
    remote_hands: bool = False
    """Built-in tools run on a self-hosted worker (`corral.hands_remote`)."""
    worker_lost_seq: int = 0
    """Seq of the last `corral.worker_lost`: remote calls logged before it lost their worker."""
    turn_starts: dict[str, int] = field(default_factory=dict)
    """Tool name -> calls started in the current turn (per-turn limits such as max_uses)."""
    usage: dict[str, int] = field(default_factory=dict)
    """Token counts summed over every model request (the `span.model_request_end`s)."""
    cost_nanos: int = 0
    """List cost so far in nano-dollars (`corral.model_cost`; 0 when the model is unpriced)."""
    next_floor_nanos: int = 0
    """The least the next model request can cost (from the last request's size)."""
    budget: dict[str, Any] | None = None
    """The session's budget as the wire shows it (`corral.budget`, `session.updated`)."""
    budget_nanos: int | None = None
    """Its `max_list_cost` in nano-dollars; None: no budget."""
    context: ContextMeter = field(default_factory=ContextMeter)
    """The estimated size of the next model request (compaction; `brain.window`)."""
    thread: ThreadState = field(default_factory=ThreadState)
    """Multi-agent bookkeeping (`brain/threads.py`)."""
    turn: TurnTally | None = None
    """The turn under way (None: nothing logged since the last close)."""
    closed_turn: TurnTally = field(default_factory=TurnTally)
    """The last closed turn."""

    @property
    def over_budget(self) -> bool:
        """The list cost reached the budget, or the next model request would pass it."""
        if self.budget_nanos is None:
            return False
        spent = self.cost_nanos
        return spent >= self.budget_nanos or spent + self.next_floor_nanos > self.budget_nanos

    def lost(self, call: ToolCall) -> bool:
        """A remote call its worker may have been running when its lease expired: it gets an
        error result, because no worker will answer it (and none may run it again)."""
        return (
            call.remote
            and call.seq < self.worker_lost_seq
            and (call.permission == "allow" or call.confirmation == "allow")
        )

    @property
    def interrupt_pending(self) -> bool:
        """A `user.interrupt` arrived after the last turn close."""
        return self.interrupt_seq > self.last_close_seq

    def unresolved(self) -> list[ToolCall]:
        """Calls without a result, in log order."""
        return list(self.open.values())

    def started(self, call: ToolCall) -> bool:
        """Whether `call` may already have run (so it must never run again)."""
        return call.started_seq is not None or (call.legacy and _legacy_started(self, call))


def fold(events: Iterable[tuple[int, Mapping[str, Any] | LogEvent]]) -> SessionState:
    """The state of a log given as `(seq, event)` pairs in order (bodies are parsed)."""
    state = SessionState()
    for seq, event in events:
        apply(state, seq, parse_event(event) if isinstance(event, Mapping) else event)
    return state


def apply(state: SessionState, seq: int, event: LogEvent) -> SessionState:
    """Fold one event (the next in the log, at `seq`) into `state`, in place; returns it."""
    state.last_seq = seq
    _tally(state, event)
    if event.session_thread_id is not None:
        return state  # a cross-post or echo: it belongs to another thread's log
    state.context.apply(event)
    if not _apply_call_event(state, seq, event) and not _apply_cost_event(state, event):
        _apply_turn_event(state, seq, event)
    apply_thread(state, seq, event)
    return state


def _tally(state: SessionState, event: LogEvent) -> None:
    """Count every event of the log, cross-posts too (as telemetry always has)."""
    turn = state.turn
    if turn is None:
        turn = state.turn = TurnTally(started_at=event.processed_at)
    if isinstance(event, SpanModelRequestEndEvent):
        turn.model_requests += 1
        for key, count in event.model_usage.items():
            turn.usage[key] = turn.usage.get(key, 0) + int(count)


def _apply_call_event(state: SessionState, seq: int, event: LogEvent) -> bool:
    """Tool uses, results, confirmations and start markers; False for any other event."""
    match event:
        case AgentToolUseEvent() | AgentCustomToolUseEvent() | AgentMcpToolUseEvent():
            _add_call(state, seq, event)
        case AgentToolResultEvent() | UserToolResultEvent():
            _resolve(state, seq, event.tool_use_id)
        case UserCustomToolResultEvent():
            _resolve(state, seq, event.custom_tool_use_id)
        case AgentMcpToolResultEvent():
            _resolve(state, seq, event.mcp_tool_use_id)
        case UserToolConfirmationEvent():
            call = state.calls.get(event.tool_use_id)
            if call is not None and call.confirmation is None:
                call.confirmation = event.result
                call.deny_message = event.deny_message
                call.confirmed_seq = seq
        case ToolStartedEvent():
            call = state.calls.get(event.tool_use_id)
            if call is not None and call.started_seq is None:
                call.started_seq = seq
                state.turn_starts[call.name] = state.turn_starts.get(call.name, 0) + 1
        case LogFormatEvent():
            _mark_format(state, seq)
        case HandsRemoteEvent():
            state.remote_hands = True
        case WorkerLostEvent():
            state.worker_lost_seq = seq
        case _:
            return False
    return True


def _apply_cost_event(state: SessionState, event: LogEvent) -> bool:
    """List cost and budget; False for any other event."""
    match event:
        case ModelCostEvent():
            state.cost_nanos += event.nanos
            state.next_floor_nanos = event.floor_nanos
        case BudgetSetEvent():
            _set_budget(state, event.budget)
        case ContextSummaryEvent():  # a summary request succeeded; its tokens count too
            _add_usage(state, event.model_usage)
            _reset_retries(state)
        case SessionUpdatedEvent() if "budget" in event.model_fields_set:
            _set_budget(state, event.budget)
        case _:
            return False
    return True


def _apply_turn_event(state: SessionState, seq: int, event: LogEvent) -> None:
    match event:
        case UserMessageEvent() | SystemMessageEvent():
            state.last_input_seq = seq
        case UserInterruptEvent():
            # Whatever was asked before an interrupt is dropped, not answered later.
            state.interrupt_seq = seq
            state.last_answer_seq = max(state.last_answer_seq, seq)
        case SpanModelRequestStartEvent():
            state.request_starts[event.id] = seq
        case SpanModelRequestEndEvent():
            _end_request(state, seq, event)
        case SessionErrorEvent():
            _apply_error(state, seq, event)
        case SessionStatusRunningEvent():
            _set_status(state, "running")
            state.last_running_seq = seq
        case SessionStatusRescheduledEvent():
            _set_status(state, "rescheduling")
        case SessionStatusIdleEvent():
            _set_status(state, "idle")
            if event.stop_reason.type == "requires_action":
                state.waiting_on = tuple(event.stop_reason.event_ids or ())
            else:
                if event.stop_reason.type == "budget_reached":  # its input is not answered
                    state.last_answer_seq = max(state.last_answer_seq, seq)
                _close_turn(state, seq)
        case SessionStatusTerminatedEvent():
            _set_status(state, "terminated")
            _close_turn(state, seq)


def _apply_error(state: SessionState, seq: int, event: SessionErrorEvent) -> None:
    if event.error.type in TURN_CONTINUES_ERRORS:
        return  # an MCP server failed: the turn goes on without it (the model is told)
    if event.error.retry_status.type == "retrying":
        state.model_retries += 1
        state.retry_since = state.retry_since or event.processed_at
    else:
        # The turn gave up: what it was answering needs no further model call.
        state.last_answer_seq = max(state.last_answer_seq, seq)
        _reset_retries(state)


def _reset_retries(state: SessionState) -> None:
    state.model_retries = 0
    state.retry_since = None


def _add_call(state: SessionState, seq: int, event: ToolUse) -> None:
    kind: CallKind = "custom"
    permission = "allow"
    if not isinstance(event, AgentCustomToolUseEvent):
        kind = "mcp" if isinstance(event, AgentMcpToolUseEvent) else "builtin"
        permission = event.evaluated_permission
    call = ToolCall(
        event_id=event.id,
        kind=kind,
        name=event.name,
        input=event.input,
        permission=permission,
        seq=seq,
        legacy=state.format_seq == 0,
        server=event.mcp_server_name if isinstance(event, AgentMcpToolUseEvent) else "",
        remote=state.remote_hands and kind == "builtin",
    )
    state.calls[call.event_id] = call
    state.open[call.event_id] = call


def _resolve(state: SessionState, seq: int, use_id: str) -> None:
    call = state.open.pop(use_id, None)
    if call is None:
        return
    call.result_seq = seq
    if not state.interrupt_pending:
        # A result logged after an interrupt (the cancelled call's) asks the model nothing.
        state.last_input_seq = seq


def _set_budget(state: SessionState, budget: dict[str, Any] | None) -> None:
    state.budget = budget
    amount = ((budget or {}).get("max_list_cost") or {}).get("amount")
    # validated when it was set (pricing.parse_budget): whole cents
    state.budget_nanos = None if amount is None else int(amount) * NANOS_PER_CENT


def _end_request(state: SessionState, seq: int, event: SpanModelRequestEndEvent) -> None:
    state.model_requests += 1
    _add_usage(state, event.model_usage)
    started = state.request_starts.pop(event.model_request_start_id, seq)
    if not event.is_error:
        # Input logged while the model was streaming was not in its request: only what
        # preceded the request's start counts as answered.
        state.last_answer_seq = max(state.last_answer_seq, started)
        _reset_retries(state)


def _add_usage(state: SessionState, model_usage: Mapping[str, int]) -> None:
    for key, count in model_usage.items():
        state.usage[key] = state.usage.get(key, 0) + int(count)


def _set_status(state: SessionState, status: Status) -> None:
    if state.status == "terminated":
        # Final: a status a brain appended while its session or thread was being archived
        # (after the termination, in the log) must not bring it back to work.
        return
    state.status = status
    state.waiting_on = None


def _close_turn(state: SessionState, seq: int) -> None:
    """A closed turn abandons its open calls and resets its retry count."""
    state.last_close_seq = seq
    state.closed_turn, state.turn = state.turn or TurnTally(), None
    _reset_retries(state)
    state.turn_starts.clear()
    for call in state.open.values():
        call.abandoned = True
    state.open.clear()


def _mark_format(state: SessionState, seq: int) -> None:
    """From here on starts are marked; freeze what the old inference says of earlier calls."""
    if state.format_seq:
        return
    state.format_seq = seq
    for call in state.open.values():
        if call.legacy and _legacy_started(state, call):
            call.started_seq = seq
        call.legacy = False


def _legacy_started(state: SessionState, call: ToolCall) -> bool:
    """How older brains' logs say a server-side call may have run (they wrote no markers):
    allowed calls ran right after being logged; confirmed ones after the next running status."""
    if call.kind == "custom" or call.resolved:
        return False
    if call.permission == "allow":
        return True
    return (
        call.confirmation == "allow"
        and call.confirmed_seq is not None
        and state.last_running_seq > call.confirmed_seq
    )
