"""`decide(state) -> Action`: the brain's whole policy, pure and total.

Each action kind has exactly one function in `actions.py`, which performs at most one side
effect (one tool call or one model call) and returns here. So this is the one place where
interrupts are honoured and where "may this call run?" is answered.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.brain.state import SessionState, ToolCall
from corral.brain.threads import Relay, relay_due, threads_working, wait_empty


@dataclass(frozen=True, slots=True)
class Halt:
    """Nothing to do until new input arrives."""


@dataclass(frozen=True, slots=True)
class RepairDangling:
    """Calls whose start is logged but whose result is not: report, never re-run."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class AnswerLost:
    """Remote calls whose worker's lease expired: answer each with an error, exactly once."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class HandleInterrupt:
    """Close the turn after a `user.interrupt`."""


@dataclass(frozen=True, slots=True)
class RefuseTool:
    """Answer a call the client denied with the denial."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class RunTool:
    """Run one allowed or confirmed server-side call (marking its start first)."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class RequestAction:
    """Go idle until the client answers these events."""

    event_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model for the next response; `attempt` > 0 is a retry after a failure."""

    attempt: int = 0


@dataclass(frozen=True, slots=True)
class StopAtBudget:
    """The next model request would take the list cost past the budget: go idle with
    `budget_reached` instead (raising the budget and sending a message continues)."""


@dataclass(frozen=True, slots=True)
class Compact:
    """The next request would pass the context threshold: summarise older turns first
    (`brain.compaction`); `attempt` > 0 is a retry after a failed summary request."""

    attempt: int = 0


@dataclass(frozen=True, slots=True)
class StopAtCompactionLimit:
    """Compacted too many times in a row without a model response: end the turn with
    `compaction_limit_reached_error`."""


@dataclass(frozen=True, slots=True)
class FinishTurn:
    """The model is done: go idle with `end_turn`."""


Action = (
    Halt
    | RepairDangling
    | AnswerLost
    | HandleInterrupt
    | RefuseTool
    | RunTool
    | RequestAction
    | CallModel
    | StopAtBudget
    | Compact
    | StopAtCompactionLimit
    | FinishTurn
    | Relay
)


def decide(state: SessionState) -> Action:
    """The next step for a session in `state`."""
    if (relay := relay_due(state)) is not None:
        return relay  # a child thread's news for its parent goes first, even when terminated
    if state.status == "terminated":
        return Halt()
    open_calls = state.unresolved()
    dangling = tuple(c for c in open_calls if state.started(c))
    if dangling:
        return RepairDangling(dangling)
    if state.interrupt_pending:
        return HandleInterrupt()
    lost = tuple(c for c in open_calls if state.lost(c))
    if lost:
        return AnswerLost(lost)
    step = _open_call_step(state, open_calls)
    if step is not None:
        return step
    if state.last_input_seq > state.last_answer_seq:
        return _answer(state)
    if state.status in ("running", "rescheduling"):
        return FinishTurn()
    return Halt()


def _answer(state: SessionState) -> Action:
    """Input awaits the model: call it, unless the budget or the context window says not yet."""
    if state.over_budget:
        return StopAtBudget()
    if state.context.over:
        return StopAtCompactionLimit() if state.context.exhausted else Compact(state.model_retries)
    return CallModel(state.model_retries)


def _open_call_step(state: SessionState, open_calls: list[ToolCall]) -> Action | None:
    """What the open calls ask for next (None: nothing, go on with the turn)."""
    empty_wait: ToolCall | None = None
    for call in open_calls:
        if call.confirmation == "deny":
            return RefuseTool(call)
        if wait_empty(state, call):  # the response's other calls go first (a start, a send)
            empty_wait = empty_wait or call
            continue
        if _runnable(call):
            return RunTool(call)
    awaiting = tuple(c.event_id for c in open_calls if c.awaiting_client)
    if awaiting:
        return Halt() if state.waiting_on == awaiting else RequestAction(awaiting)
    if empty_wait is not None:
        # A coordinator waits while a thread can still reply (the reply, or the thread's
        # progress report, wakes it); with none working the wait answers "nothing to wait for".
        return Halt() if threads_working(state) else RunTool(empty_wait)
    return None


def _runnable(call: ToolCall) -> bool:
    """A server-side call that policy or the client allowed (never started: see above)."""
    if call.kind == "custom" or call.remote:
        return False  # the client or the self-hosted worker runs it
    return call.permission == "allow" or call.confirmation == "allow"
