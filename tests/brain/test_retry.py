"""When a failed model call is retried (`brain.retry.plan`): the provider's wait when it
named one, jittered exponential backoff otherwise, and never past the time bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from corral.brain.retry import GiveUp, Retry, backoff, plan
from corral.brain.run import BrainSettings
from corral.ids import rfc3339
from corral.models.base import ModelError

NOW = datetime(2026, 12, 2, 0, 30, 0, tzinfo=UTC)
SETTINGS = BrainSettings(model_retry_max_seconds=120.0)


def rate_limited(wait: float | None = None) -> ModelError:
    return ModelError("rate_limited", "anthropic: 429: slow down", retryable=True, retry_after=wait)


def since(seconds_ago: float) -> str:
    return str(rfc3339(NOW - timedelta(seconds=seconds_ago)))


@pytest.mark.parametrize(
    ("wait", "attempt", "failing_for", "expected"),
    [
        (30.0, 0, None, Retry(30.0)),  # the first failure: the whole bound is left
        (30.0, 3, 90.0, Retry(30.0)),  # ends exactly at the bound
        (120.0, 0, None, Retry(120.0)),
        (2.0, 1, 5.0, Retry(2.0)),
        (0.0, 0, None, Retry(0.0)),
        (600.0, 0, None, "the provider asked to wait 600 s, more than the 120 s left"),
        (31.0, 3, 90.0, "the provider asked to wait 31 s, more than the 30 s left"),
        (1.0, 1, 500.0, "more than the 0 s left of the 120 s retry bound"),
    ],
)
def test_the_providers_wait_is_kept_within_the_bound(
    wait: float, attempt: int, failing_for: float | None, expected: Retry | str
) -> None:
    first = None if failing_for is None else since(failing_for)
    planned = plan(SETTINGS, rate_limited(wait), attempt, first, NOW)
    if isinstance(expected, Retry):
        assert planned == expected
    else:
        assert isinstance(planned, GiveUp)
        assert planned.error.message.startswith("anthropic: 429: slow down (")
        assert expected in planned.error.message
        assert "(model_retry_max_seconds)" in planned.error.message
        assert (planned.error.kind, planned.error.retryable) == ("rate_limited", True)


@pytest.mark.parametrize("attempt", [0, 1, 2, 3])
def test_without_a_wait_the_backoff_doubles_with_jitter(attempt: int) -> None:
    ceiling = min(0.5 * 2**attempt, 8.0)
    delays = []
    for _ in range(200):
        planned = plan(SETTINGS, rate_limited(), attempt, since(1.0), NOW)
        assert isinstance(planned, Retry)
        delays.append(planned.delay)
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert len(set(delays)) > 1  # jittered: sessions failing together spread out


def test_backoff_is_capped() -> None:
    assert all(4.0 <= backoff(SETTINGS, 10) <= 8.0 for _ in range(50))


def test_a_backoff_past_the_bound_gives_up_saying_how_long_it_tried() -> None:
    planned = plan(SETTINGS, rate_limited(), 1, since(119.9), NOW)
    assert isinstance(planned, GiveUp)
    assert "still failing after 120 s of retries, the 120 s retry bound" in planned.error.message


@pytest.mark.parametrize(
    "error",
    [
        ModelError("invalid_request", "bad", retryable=False),
        ModelError("authentication", "no key", retryable=False, retry_after=1.0),
    ],
)
def test_errors_not_worth_a_retry_are_given_up_unchanged(error: ModelError) -> None:
    assert plan(SETTINGS, error, 0, None, NOW) == GiveUp(error)


def test_the_retry_count_still_ends_the_retries() -> None:
    error = rate_limited(1.0)
    assert plan(SETTINGS, error, SETTINGS.max_model_retries, since(3.0), NOW) == GiveUp(error)
