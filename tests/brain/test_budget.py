"""Budgets in `decide` and the cost events: one row per situation, on hand-written logs."""

from __future__ import annotations

import pytest

from corral.brain import events as ev
from corral.brain.cost import usage_events
from corral.brain.decide import CallModel, FinishTurn, Halt, RunTool, StopAtBudget, decide
from corral.pricing import NANOS_PER_CENT, Price, cost_nanos, money, parse_budget
from tests.brain.logs import Body, fmt, folded, idle, msg, result, running, span, span_end, use

CENT = NANOS_PER_CENT


def budget(cents: int) -> Body:
    return ev.event(
        "corral.budget",
        budget={"type": "limit", "max_list_cost": {"amount": str(cents), "currency": "USD"}},
    )


def updated(cents: int | None) -> Body:
    value = None
    if cents is not None:
        value = {"type": "limit", "max_list_cost": {"amount": str(cents), "currency": "USD"}}
    return ev.event("session.updated", budget=value)


def cost(cents: int, floor_cents: int = 0) -> Body:
    return ev.event("corral.model_cost", nanos=cents * CENT, floor_nanos=floor_cents * CENT)


def turn(*tail: Body, spent: int = 0, floor: int = 0) -> list[Body]:
    """A message answered by a response holding `tail` that cost `spent` cents."""
    return [msg(), fmt(), running(), span("s1"), *tail, span_end("s1"), cost(spent, floor)]


CASES: list[tuple[str, list[Body], str]] = [
    ("no budget: any cost", [*turn(use("a"), spent=10**6), result("a")], "CallModel"),
    ("under budget", [budget(100), *turn(use("a"), spent=10), result("a")], "CallModel"),
    ("spent reaches the budget", [budget(100), *turn(use("a"), spent=100), result("a")], "Stop"),
    (
        "the next request's floor would pass it",
        [budget(100), *turn(use("a"), spent=60, floor=41), result("a")],
        "Stop",
    ),
    (
        "the floor fits exactly",
        [budget(100), *turn(use("a"), spent=60, floor=40), result("a")],
        "CallModel",
    ),
    ("over budget: a tool still runs", [budget(10), *turn(use("a"), spent=50)], "RunTool"),
    ("over budget: the turn still finishes", [budget(10), *turn(spent=50)], "FinishTurn"),
    (
        "stopped: the input is not answered again",
        [budget(10), *turn(use("a"), spent=50), result("a"), idle("budget_reached")],
        "Halt",
    ),
    (
        "a new message on a spent budget stops at once",
        [budget(10), *turn(spent=50), idle(), msg("more")],
        "Stop",
    ),
    (
        "raised by an update: goes on",
        [budget(10), *turn(spent=50), idle(), updated(500), msg("more")],
        "CallModel",
    ),
    (
        "removed by an update: goes on",
        [budget(10), *turn(spent=50), idle(), updated(None), msg("more")],
        "CallModel",
    ),
    (
        "costs add up across turns",
        [budget(100), *turn(spent=60), idle(), *turn(spent=30), idle(), msg("3")],
        "CallModel",
    ),
    (
        "costs add up across turns to the budget",
        [budget(100), *turn(spent=60), idle(), *turn(spent=40), idle(), msg("3")],
        "Stop",
    ),
]


def show(action: object) -> str:
    names = {CallModel: "CallModel", StopAtBudget: "Stop", RunTool: "RunTool"}
    names.update({FinishTurn: "FinishTurn", Halt: "Halt"})
    return names.get(type(action), type(action).__name__)


def with_ids(bodies: list[Body]) -> list[Body]:
    return [{"id": f"sevt_{i}", **b} if "id" not in b else b for i, b in enumerate(bodies)]


@pytest.mark.parametrize(("log", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_with_budget(log: list[Body], expected: str) -> None:
    assert show(decide(folded(with_ids(log)))) == expected


SONNET = Price(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75)


def test_cost_is_exact_per_token_kind() -> None:
    usage = {
        "input_tokens": 1_000_000,
        "output_tokens": 1_000_000,
        "cache_read_input_tokens": 1_000_000,
        "cache_creation_input_tokens": 1_000_000,
    }
    assert cost_nanos(SONNET, usage) == (3 + 15 + 0.3 + 3.75) * 10**9
    assert money(cost_nanos(SONNET, usage)) == {"amount": "2205", "currency": "USD"}
    # one input token: 3 micro-dollars; a million of them rounds to 300 cents exactly
    assert cost_nanos(SONNET, {"input_tokens": 1}) == 3000
    assert money(cost_nanos(SONNET, {"input_tokens": 1})) == {"amount": "0", "currency": "USD"}
    assert money(CENT // 2) == {"amount": "1", "currency": "USD"}  # half a cent rounds up


def test_usage_events_sum_the_state_and_the_response() -> None:
    state = folded(with_ids([budget(100), *turn(spent=2)]))
    state.usage.update({"input_tokens": 100, "output_tokens": 7})
    response = {
        "input_tokens": 1000,
        "output_tokens": 100,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    cost_event, usage_event = usage_events(state, SONNET, response)
    assert cost_event["type"] == "corral.model_cost"
    assert cost_event["nanos"] == 1000 * 3000 + 100 * 15000
    assert cost_event["floor_nanos"] == 1100 * 300  # re-sent, at the cache-read rate
    assert usage_event["type"] == "session.usage"
    assert usage_event["usage"]["input_tokens"] == 1100
    assert usage_event["usage"]["output_tokens"] == 107
    assert usage_event["usage"]["list_cost"] == money(2 * CENT + cost_event["nanos"])
    assert usage_event["budget"] == parse_budget(state.budget)[0]


def test_unpriced_model_has_usage_but_no_cost() -> None:
    (usage_event,) = usage_events(folded([]), None, {"input_tokens": 5})
    assert usage_event["type"] == "session.usage"
    assert "list_cost" not in usage_event["usage"]


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "limit", "max_list_cost": {"amount": "0100", "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": "1.5", "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": 100, "currency": "USD"}},
        {"type": "limit", "max_list_cost": {"amount": "100", "currency": "EUR"}},
        {"type": "cap", "max_list_cost": {"amount": "100", "currency": "USD"}},
        {"type": "limit"},
    ],
)
def test_bad_budgets_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="budget"):
        parse_budget(bad)
