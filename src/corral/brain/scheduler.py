"""Brain workers: claim woken sessions from the queue and drive them (DBOS-style recovery:
an expired lease is simply claimable again, so a dead brain's session is re-driven).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskGroup

from corral.brain.loop import drive
from corral.brain.remote import tend_work
from corral.brain.run import BrainDeps
from corral.errors import StorageFailure
from corral.ids import new_id
from corral.observability.metrics import LEASE_TAKEOVERS
from corral.session.log import Fence

log = logging.getLogger("corral.scheduler")
SANDBOX_TICK_SECONDS = 2.0
STORAGE_RETRY_MAX_SECONDS = 5.0
"""Longest wait between two claims while the store cannot write (a full disk)."""
WORK_CHECK_SECONDS = 2.0
"""How often expired self-hosted work leases are looked for (at most a third of their ttl)."""
"""How often this process's sandboxes are checked against their sessions (and reaped)."""


def worker_name() -> str:
    """A unique owner name for leases: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{new_id('w')[-6:]}"


class Scheduler:
    """`concurrency` brain slots in this process."""

    def __init__(
        self,
        deps: BrainDeps,
        *,
        concurrency: int,
        poll_seconds: float = 1.0,
        sandbox_tick_seconds: float = SANDBOX_TICK_SECONDS,
    ) -> None:
        self.deps = deps
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self.sandbox_tick_seconds = sandbox_tick_seconds
        self.owner = worker_name()
        self._busy = 0
        self._slot_freed = anyio.Event()
        self._claim_backoff = poll_seconds
        self._waiting: anyio.CancelScope | None = None
        """The claim loop's wait in progress, ended when the stop is requested."""
        deps.stopping.on_request(self._end_wait)

    @property
    def busy(self) -> int:
        """Sessions being driven right now."""
        return self._busy

    async def run(self) -> None:
        """Claim and drive sessions until cancelled, or until this process is stopping
        (`deps.stopping`): then nothing new is claimed, and this returns once every brain
        has finished its step and handed its session over.

        Claims are batched (as many as there are free slots) so that a burst of wakes costs
        one transaction, not one per session. Sandboxes belong to the process that runs
        brains, so their tick runs here too; a process without brain slots (API only) does
        no sandbox work at all.
        """
        if self.concurrency <= 0:
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._tend_sandboxes)
            if self.deps.work is not None:
                interval = min(WORK_CHECK_SECONDS, self.deps.settings.work_ttl_seconds / 3)
                tg.start_soon(tend_work, self.deps.store, self.deps.work, interval)
            async with anyio.create_task_group() as brains:
                await self._claim_until_stopping(brains)
            tg.cancel_scope.cancel()  # every brain is done: the ticks go too

    async def _claim_until_stopping(self, brains: TaskGroup) -> None:
        stopping = self.deps.stopping
        while not stopping.requested:
            free = self.concurrency - self._busy
            if free <= 0:
                await self._unless_stopping(self._slot_freed.wait)
                continue
            # Never cancelled mid-claim: a claim committed but not seen would strand its
            # sessions for a whole lease.
            fences = await self._claim(free)
            for fence in fences:
                if fence.takeover:
                    LEASE_TAKEOVERS.inc()
                self._busy += 1
                brains.start_soon(self._drive, fence)
            if len(fences) < free:
                # Nothing else was due: no second claim just to hear so. A wake since
                # this claim began ends the wait at once.
                await self._unless_stopping(
                    lambda: self.deps.store.wait_for_work(self.poll_seconds)
                )

    async def _unless_stopping(self, wait: Callable[[], Awaitable[object]]) -> None:
        """Await `wait()` until it returns or the stop is requested. One cancel scope the
        stop's callback cancels: a task group racing two tasks cost the event loop a
        scheduled task pair on every wait for work, that is every turn."""
        if self.deps.stopping.requested:
            return
        with anyio.CancelScope() as scope:
            self._waiting = scope
            try:
                await wait()
            finally:
                self._waiting = None

    def _end_wait(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()

    async def _tend_sandboxes(self) -> None:
        pool = self.deps.sandboxes
        if pool is None:
            return
        while True:
            await anyio.sleep(self.sandbox_tick_seconds)
            try:
                await pool.tick()
            except StorageFailure:
                pass  # the store logged its condition once; the next tick tries again
            except Exception:  # e.g. the database is away: the next tick tries again
                log.exception("sandbox tick failed")

    async def _claim(self, limit: int) -> list[Fence]:
        try:
            fences = await self.deps.store.claim_many(
                self.owner, self.deps.settings.lease_seconds, limit
            )
        except StorageFailure:
            # The store logged the condition once; claims (writes) retry with a backoff
            # until it can write again, when the sessions it stopped report their turns.
            await self._unless_stopping(lambda: anyio.sleep(self._claim_backoff))
            self._claim_backoff = min(self._claim_backoff * 2, STORAGE_RETRY_MAX_SECONDS)
            return []
        except Exception:
            log.exception("claim failed")
            await anyio.sleep(self.poll_seconds)
            return []
        self._claim_backoff = self.poll_seconds
        return fences

    async def _drive(self, fence: Fence) -> None:
        halted = False
        try:
            halted = await drive(self.deps, fence)
        except Exception:
            log.exception("brain failed on %s", fence.session_id)
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self.deps.store.release(fence)
                    if not halted:
                        # Lease lost, stalled past it, or handed over mid-turn by a stopping
                        # process: the work is not done, so it must stay claimable (release
                        # alone would strand it); the wake lets another process take it now.
                        await self.deps.store.wake(fence.session_id)
                except StorageFailure:
                    pass  # logged once by the store; the lease expires and it is claimed again
                except Exception:
                    log.exception("release failed on %s", fence.session_id)
            self._busy -= 1
            self._slot_freed.set()
            self._slot_freed = anyio.Event()
