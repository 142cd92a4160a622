"""Keeping a work item's lease: the heartbeat loop, with the SDK worker's semantics.

First beat at once with `NO_HEARTBEAT`, then every `max(1, min(ttl/2, 30))` seconds echoing
the previous `last_heartbeat`. The lease ends when the server says `stopping`/`stopped` or
does not extend it (`STOP`), when a beat meets 412 (`LOST`: the queue or another worker
holds it now), on any other 4xx (`REJECTED`), or when no beat succeeded for a whole ttl
(`ASSUMED_LOST`), so two workers never serve one item.
"""

from __future__ import annotations

import enum
import logging
import time
from typing import Any

import anthropic
import anyio

log = logging.getLogger("corral.selfhosted")

NO_HEARTBEAT = "NO_HEARTBEAT"
DEFAULT_TTL = 90.0
MAX_INTERVAL = 30.0
_TRANSIENT = (anthropic.APIConnectionError, anthropic.InternalServerError, TimeoutError)


class End(enum.Enum):
    """Why a lease ended."""

    DONE = "done"
    """The worker finished with the item while holding the lease."""
    STOP = "stop"
    """The server asked the worker to stop (stopping/stopped, or lease not extended)."""
    LOST = "lost"
    """A heartbeat met 412: the item is not this worker's any more."""
    REJECTED = "rejected"
    """A heartbeat met another 4xx."""
    ASSUMED_LOST = "assumed_lost"
    """No heartbeat succeeded for a whole ttl."""


class Lease:
    """This worker's view of one item's lease; the first recorded end wins."""

    def __init__(self) -> None:
        self.reason: End | None = None
        self._ended = anyio.Event()
        self.ttl = DEFAULT_TTL

    def finish(self, reason: End) -> None:
        """Record why the lease ended (only the first reason counts) and wake waiters."""
        if self.reason is None:
            self.reason = reason
        self._ended.set()

    @property
    def ended(self) -> bool:
        """True once the lease ended for any reason."""
        return self._ended.is_set()

    @property
    def lost(self) -> bool:
        """The item belongs to the queue or another worker: never stop it, never post for it."""
        return self.reason in (End.LOST, End.ASSUMED_LOST)

    async def wait(self) -> None:
        """Until the lease ends."""
        await self._ended.wait()


async def keep(
    client: anthropic.AsyncAnthropic, environment_id: str, work_id: str, lease: Lease
) -> None:
    """Heartbeat `work_id` until `lease` ends (and end it on the conditions above)."""
    work = client.beta.environments.work
    interval = MAX_INTERVAL
    last = NO_HEARTBEAT
    last_success = time.monotonic()
    while not lease.ended:
        try:
            with anyio.fail_after(interval):
                beat: Any = await work.heartbeat(
                    work_id, environment_id=environment_id, expected_last_heartbeat=last
                )
        except anthropic.APIStatusError as exc:
            if exc.status_code == 412:
                log.warning("work %s: lease lost (412)", work_id)
                lease.finish(End.LOST)
                return
            if exc.status_code < 500 and exc.status_code != 429:
                log.error("work %s: heartbeat refused (%s)", work_id, exc.status_code)
                lease.finish(End.REJECTED)
                return
            if _expired(last_success, lease, work_id, exc):
                return
        except _TRANSIENT as exc:
            if _expired(last_success, lease, work_id, exc):
                return
        else:
            last = beat.last_heartbeat
            last_success = time.monotonic()
            if beat.ttl_seconds > 0:
                lease.ttl = float(beat.ttl_seconds)
                interval = max(1.0, min(lease.ttl / 2, MAX_INTERVAL))
            if beat.state in ("stopping", "stopped") or not beat.lease_extended:
                log.info("work %s: the server asked to stop (%s)", work_id, beat.state)
                lease.finish(End.STOP)
                return
        with anyio.move_on_after(interval):
            await lease.wait()


def _expired(last_success: float, lease: Lease, work_id: str, exc: BaseException) -> bool:
    """Whether a failed beat ends the lease (no success for a whole ttl); ends it if so."""
    if time.monotonic() - last_success > lease.ttl:
        log.error("work %s: no heartbeat succeeded for %.0fs (%s)", work_id, lease.ttl, exc)
        lease.finish(End.ASSUMED_LOST)
        return True
    log.warning("work %s: heartbeat failed, retrying (%s)", work_id, exc)
    return False
