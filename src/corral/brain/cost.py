"""What a model response adds to a session's usage and list cost, as events to append with it.

Pure: the price comes from the caller (the route's or the built-in list price), the totals
from the folded state. The events are `corral.model_cost` (internal, exact nano-dollars; the
projection and the budget check sum these) and the public `session.usage` snapshot.
"""

from __future__ import annotations

from typing import Any

from corral.brain import events as ev
from corral.brain.state import SessionState
from corral.pricing import Price, cost_nanos, money, next_request_floor

_TOKEN_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens")


def usage_events(
    state: SessionState, price: Price | None, model_usage: dict[str, int]
) -> list[dict[str, Any]]:
    """Events recording one response of `model_usage` tokens on a session in `state` (the
    state before the response is applied)."""
    out: list[dict[str, Any]] = []
    total = state.cost_nanos
    if price is not None:
        nanos = cost_nanos(price, model_usage)
        total += nanos
        floor = next_request_floor(price, model_usage)
        out.append(ev.event("corral.model_cost", nanos=nanos, floor_nanos=floor))
    usage = snapshot(state.usage, model_usage, total if price is not None else None)
    out.append(ev.event("session.usage", usage=usage, budget=state.budget))
    return out


def snapshot(
    before: dict[str, int], model_usage: dict[str, int], cost: int | None
) -> dict[str, Any]:
    """The SDK's `BetaManagedAgentsSessionUsageSnapshot` after one more request."""
    summed = {key: before.get(key, 0) + model_usage.get(key, 0) for key in _TOKEN_KEYS}
    created = before.get("cache_creation_input_tokens", 0) + model_usage.get(
        "cache_creation_input_tokens", 0
    )
    out: dict[str, Any] = dict(summed)
    out["cache_creation"] = {"ephemeral_5m_input_tokens": created}  # as the projection counts
    if cost is not None:
        out["list_cost"] = money(cost)
    return out
