"""Context windows in corral.toml routes: parsing, defaults and the router's answer."""

from __future__ import annotations

from typing import Any

import pytest

from corral.context_window import ContextPolicy, default_window
from corral.models.router import ModelRoute, ModelRouter, parse_routes


def routes(**extra: Any) -> dict[str, Any]:
    return {"routes": [{"match": "small-*", "provider": "anthropic", **extra}]}


def test_defaults_for_known_claude_models_and_none_for_others() -> None:
    router = ModelRouter([], {})
    policy = router.context_for("claude-sonnet-4-5")
    assert policy == ContextPolicy(window=200_000, threshold=0.8)
    assert policy.limit == 160_000
    assert default_window("claude-haiku-4-5") == 200_000
    assert router.context_for("corral-scripted") is None
    assert router.context_for("no-route-matches") is None


def test_a_route_states_window_threshold_and_summariser() -> None:
    parsed = parse_routes(
        routes(context_window=4000, compaction_threshold=0.5, compaction_model="claude-haiku-4-5")
    )
    policy = ModelRouter(parsed, {}).context_for("small-model")
    assert policy == ContextPolicy(window=4000, threshold=0.5, compaction_model="claude-haiku-4-5")
    assert policy.limit == 2000
    # a threshold alone applies to a model's default window
    claude = {"match": "claude-*", "provider": "anthropic", "compaction_threshold": 0.6}
    parsed = parse_routes({"routes": [claude]})
    assert ModelRouter(parsed, {}).context_for("claude-opus-4-5") == ContextPolicy(
        window=200_000, threshold=0.6
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"context_window": 100}, "at least 1024"),
        ({"context_window": "big"}, "integer"),
        ({"context_window": True}, "integer"),
        ({"compaction_threshold": 1.5}, "between 0.2 and 0.95"),
        ({"compaction_threshold": "high"}, "number"),
        ({"compaction_model": ""}, "compaction_model"),
    ],
)
def test_bad_values_name_the_route_and_key(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        parse_routes(routes(**extra))
    assert "[[models.routes]] entry 1" in str(refused.value)


def test_a_summariser_no_route_serves_is_refused_at_startup() -> None:
    refusal = "entry 1: compaction_model 'mystery-model' matches no model route"
    with pytest.raises(ValueError, match=refusal):
        parse_routes(routes(context_window=4000, compaction_model="mystery-model"))
    parsed = parse_routes(routes(context_window=4000, compaction_model="claude-haiku-4-5"))
    assert ModelRouter(parsed, {}).context_for("small-x") is not None
    mystery = ModelRoute(match="x-*", provider="anthropic", context={"compaction_model": "y"})
    with pytest.raises(ValueError, match="compaction_model 'y' matches no model route"):
        ModelRouter([mystery], {})
