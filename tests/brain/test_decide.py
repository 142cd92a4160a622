"""`decide` on hand-written logs: one row per situation the brain can find a session in."""

from __future__ import annotations

import pytest

from corral.brain.decide import (
    Action,
    CallModel,
    FinishTurn,
    Halt,
    HandleInterrupt,
    RefuseTool,
    RepairDangling,
    RequestAction,
    RunTool,
    decide,
)
from tests.brain.logs import (
    Body,
    confirm,
    custom,
    custom_result,
    error,
    fmt,
    folded,
    idle,
    interrupt,
    msg,
    rescheduled,
    result,
    running,
    said,
    span,
    span_end,
    started,
    use,
)


def turn(*tail: Body) -> list[Body]:
    """A message answered by a response holding `tail` (a brain that marks starts)."""
    return [msg(), fmt(), running(), span("s1"), *tail, span_end("s1")]


def legacy_turn(*tail: Body) -> list[Body]:
    """The same, logged by an older brain (no `corral.log_format`)."""
    return [msg(), running(), span("s1"), *tail, span_end("s1")]


ev_ = rescheduled()

CASES: list[tuple[str, list[Body], str]] = [
    ("empty log", [], "Halt"),
    ("a message", [msg()], "CallModel(0)"),
    (
        "crash mid-stream: only the span start",
        [msg(), fmt(), running(), span("s1")],
        "CallModel(0)",
    ),
    ("answered, still running", turn(said("hello")), "FinishTurn"),
    ("answered and closed", [*turn(said("hello")), idle()], "Halt"),
    (
        "message while streaming gets its own request",
        [msg(), fmt(), running(), span("s1"), msg("2"), said("x"), span_end("s1")],
        "CallModel(0)",
    ),
    ("allowed call not started", turn(use("a")), "RunTool(a)"),
    ("allowed call started, no result", [*turn(use("a")), started("a")], "RepairDangling(a)"),
    ("allowed call answered", [*turn(use("a")), started("a"), result("a")], "CallModel(0)"),
    (
        "two allowed calls run one by one",
        [*turn(use("a"), use("b")), started("a"), result("a")],
        "RunTool(b)",
    ),
    ("ask call: ask the client", turn(use("a", "ask")), "RequestAction(a)"),
    ("ask call: already asked", [*turn(use("a", "ask")), idle("requires_action", "a")], "Halt"),
    (
        "ask call confirmed after the idle",
        [*turn(use("a", "ask")), idle("requires_action", "a"), confirm("a")],
        "RunTool(a)",
    ),
    (
        "ask call confirmed before the idle, started (hole 2)",
        [*turn(use("a", "ask")), confirm("a"), started("a")],
        "RepairDangling(a)",
    ),
    ("ask call denied", [*turn(use("a", "ask")), confirm("a", "deny")], "RefuseTool(a)"),
    ("allowed calls run before asking for the rest", turn(custom("c"), use("a")), "RunTool(a)"),
    ("custom call: ask the client", turn(custom("c")), "RequestAction(c)"),
    (
        "custom call answered",
        [*turn(custom("c")), idle("requires_action", "c"), custom_result("c")],
        "CallModel(0)",
    ),
    (
        "one of two answered: ask for the other",
        [*turn(custom("c"), custom("d")), idle("requires_action", "c", "d"), custom_result("c")],
        "RequestAction(d)",
    ),
    ("interrupt while a call waits to run", [*turn(use("a")), interrupt()], "HandleInterrupt"),
    (
        "interrupt while waiting for the client",
        [*turn(custom("c")), idle("requires_action", "c"), interrupt()],
        "HandleInterrupt",
    ),
    (
        "a started call is reported before the interrupt is honoured",
        [*turn(use("a")), started("a"), interrupt()],
        "RepairDangling(a)",
    ),
    (
        "the cancelled call's result asks the model nothing",
        [*turn(use("a")), started("a"), interrupt(), result("a", "cut", is_error=True)],
        "HandleInterrupt",
    ),
    ("interrupt honoured", [*turn(use("a")), interrupt(), idle()], "Halt"),
    (
        "interrupt just before the span start (hole 1)",
        [msg(), interrupt(), fmt(), running(), span("s1")],
        "HandleInterrupt",
    ),
    ("what came before an interrupt is dropped", [msg(), interrupt(), fmt(), idle()], "Halt"),
    (
        "a message after an interrupt is answered",
        [*turn(use("a")), interrupt(), msg("next"), idle()],
        "CallModel(0)",
    ),
    (
        "interrupt when idle still closes",
        [*turn(said("x")), idle(), interrupt()],
        "HandleInterrupt",
    ),
    (
        "retryable failure: retry",
        [
            msg(),
            fmt(),
            running(),
            span("s1"),
            span_end("s1", is_error=True),
            ev_,
            error("retrying"),
        ],
        "CallModel(1)",
    ),
    (
        "second failure",
        [
            msg(),
            fmt(),
            running(),
            span("s1"),
            span_end("s1", is_error=True),
            ev_,
            error("retrying"),
            running(),
            span("s2"),
            span_end("s2", is_error=True),
            ev_,
            error("retrying"),
        ],
        "CallModel(2)",
    ),
    (
        "retries exhausted",
        [
            msg(),
            fmt(),
            running(),
            span("s1"),
            span_end("s1", is_error=True),
            error("exhausted"),
            idle("retries_exhausted"),
        ],
        "Halt",
    ),
    (
        "a success resets the retry count",
        [
            msg(),
            fmt(),
            running(),
            span("s1"),
            span_end("s1", is_error=True),
            ev_,
            error("retrying"),
            running(),
            span("s2"),
            use("a"),
            span_end("s2"),
            started("a"),
            result("a"),
        ],
        "CallModel(0)",
    ),
    ("terminated", [msg(), {"type": "session.status_terminated"}, msg()], "Halt"),
    ("legacy: an allowed call ran as it was logged", legacy_turn(use("a")), "RepairDangling(a)"),
    (
        "legacy: confirmed, then running",
        [*legacy_turn(use("a", "ask")), idle("requires_action", "a"), confirm("a"), running()],
        "RepairDangling(a)",
    ),
    (
        "legacy: confirmed, not yet run",
        [*legacy_turn(use("a", "ask")), idle("requires_action", "a"), confirm("a")],
        "RunTool(a)",
    ),
    (
        "legacy: the format marker freezes what was inferred",
        [*legacy_turn(use("a")), fmt(), running()],
        "RepairDangling(a)",
    ),
    (
        "legacy: a confirmed call stays runnable across the marker",
        [
            *legacy_turn(use("a", "ask")),
            idle("requires_action", "a"),
            confirm("a"),
            fmt(),
            running(),
        ],
        "RunTool(a)",
    ),
]


def show(action: Action) -> str:
    match action:
        case CallModel():
            return f"CallModel({action.attempt})"
        case RunTool() | RefuseTool():
            return f"{type(action).__name__}({action.call.event_id})"
        case RepairDangling():
            return f"RepairDangling({','.join(c.event_id for c in action.calls)})"
        case RequestAction():
            return f"RequestAction({','.join(action.event_ids)})"
        case Halt() | HandleInterrupt() | FinishTurn():
            return type(action).__name__


def with_ids(bodies: list[Body]) -> list[Body]:
    """Bodies typed out inline lack the envelope the log gives every event."""
    return [{"id": f"sevt_{i}", **b} if "id" not in b else b for i, b in enumerate(bodies)]


@pytest.mark.parametrize(("log", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide(log: list[Body], expected: str) -> None:
    assert show(decide(folded(with_ids(log)))) == expected
