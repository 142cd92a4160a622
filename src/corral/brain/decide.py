"""`decide(state) -> Action`: the brain's whole policy, pure and total.

Each action kind has exactly one function in `actions.py` that carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.brain.state import SessionState, ToolCall


@dataclass(frozen=True, slots=True)
class Halt:
    """Nothing to do until new input arrives."""


@dataclass(frozen=True, slots=True)
class HandleInterrupt:
    """Close the turn after a `user.interrupt`."""


@dataclass(frozen=True, slots=True)
class RepairDangling:
    """Tool calls a dead brain started: their outcome is unknown, so report, never re-run."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class RequestAction:
    """Go idle until the client answers these events."""

    event_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunTools:
    """Execute (or refuse) confirmed tool calls."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True, slots=True)
class CallModel:
    """Ask the model for the next response."""


@dataclass(frozen=True, slots=True)
class FinishTurn:
    """The model is done: go idle with `end_turn`."""


Action = Halt | HandleInterrupt | RepairDangling | RequestAction | RunTools | CallModel | FinishTurn


def decide(state: SessionState) -> Action:
    """The next step for a session in `state`."""
    if state.status == "terminated":
        return Halt()
    if state.interrupt_pending:
        return HandleInterrupt()
    open_calls = state.unresolved()
    dangling = tuple(c for c in open_calls if _started(state, c))
    if dangling:
        return RepairDangling(dangling)
    awaiting = tuple(c.event_id for c in open_calls if c.awaiting_client)
    if awaiting:
        return Halt() if state.waiting_on == awaiting else RequestAction(awaiting)
    runnable = tuple(c for c in open_calls if c.confirmation is not None)
    if runnable:
        return RunTools(runnable)
    if state.last_input_seq > state.last_answer_seq:
        return CallModel()
    if state.status in ("running", "rescheduling"):
        return FinishTurn()
    return Halt()


def _started(state: SessionState, call: ToolCall) -> bool:
    """Whether a previous brain may already have run this server-side call."""
    if call.kind == "custom":
        return False
    if call.permission == "allow":
        return True  # allowed calls run in the same action that appended them
    return (
        call.confirmation == "allow"
        and call.confirmed_seq is not None
        and state.last_running_seq > call.confirmed_seq
    )
