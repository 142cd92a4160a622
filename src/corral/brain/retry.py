"""When a failed model call is tried again: after the wait the provider asked for (its
`retry-after` or rate-limit reset headers, `ModelError.retry_after`), else after exponential
backoff with jitter; and never past `model_retry_max_seconds` from the turn's first failure
in a row. A wait that would end past that bound gives up at once, saying why, rather than
sleeping into it or retrying before the provider is ready (which only earns another 429).

Used by the agent's model calls (`actions`) and by summary requests (`compaction`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

import anyio

from corral.brain.run import BrainSettings, Run
from corral.ids import parse_rfc3339, utc_now
from corral.models.base import ModelError


@dataclass(frozen=True, slots=True)
class Retry:
    """Try again after `delay` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class GiveUp:
    """No further attempt; `error` is what the session is told (the provider's error, with
    the reason the retries ended when it was the bound)."""

    error: ModelError


def plan(
    settings: BrainSettings,
    error: ModelError,
    attempt: int,
    retry_since: str | None,
    now: datetime | None = None,
) -> Retry | GiveUp:
    """What follows failed attempt `attempt` (0: the first call), given when the turn's
    failures in a row began (`retry_since`, None: this is the first)."""
    if not error.retryable or attempt >= settings.max_model_retries:
        return GiveUp(error)
    bound = settings.model_retry_max_seconds
    elapsed = 0.0
    if retry_since is not None:
        elapsed = max(((now or utc_now()) - parse_rfc3339(retry_since)).total_seconds(), 0.0)
    left = max(bound - elapsed, 0.0)
    if error.retry_after is not None:
        if error.retry_after > left:
            return GiveUp(
                _amended(
                    error,
                    f"the provider asked to wait {error.retry_after:.3g} s, more than the "
                    f"{left:.0f} s left of the {bound:g} s retry bound (model_retry_max_seconds)",
                )
            )
        return Retry(error.retry_after)
    delay = backoff(settings, attempt + 1)
    if delay > left:
        return GiveUp(
            _amended(
                error,
                f"still failing after {elapsed:.0f} s of retries, the {bound:g} s retry bound "
                "(model_retry_max_seconds)",
            )
        )
    return Retry(delay)


def backoff(settings: BrainSettings, attempt: int) -> float:
    """The wait before retry `attempt` (1: the first retry) when the provider named none:
    doubling from `retry_base_seconds` up to `retry_max_seconds`, each drawn between half
    and all of it, so sessions failing together do not retry in lockstep."""
    ceiling = min(settings.retry_base_seconds * 2.0 ** (attempt - 1), settings.retry_max_seconds)
    return ceiling * random.uniform(0.5, 1.0)


async def wait(run: Run, attempt: int, since: int) -> bool:
    """Wait before retry `attempt`: as planned when the failure was recorded by this run (a
    brain taking the session over backs off on its own); False if an interrupt came, or
    this process started stopping (nothing was done yet, so the session is handed over at
    once rather than after a wait that may outlast the shutdown grace)."""
    delay, run.retry_delay = run.retry_delay, None
    if delay is None:
        delay = backoff(run.deps.settings, attempt)

    async def pause() -> None:
        with anyio.move_on_after(delay):
            await run.deps.stopping.wait()

    _, interrupted = await run.until_interrupt(pause, after=since)
    return not interrupted and not run.deps.stopping.requested


def _amended(error: ModelError, reason: str) -> ModelError:
    return ModelError(
        error.kind,
        f"{error.message} ({reason})",
        retryable=error.retryable,
        status=error.status,
        retry_after=error.retry_after,
    )
