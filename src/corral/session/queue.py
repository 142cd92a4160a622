"""The wake queue: which sessions need a brain, and which brain holds each (lease + fence)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from corral.session.log import Fence


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStatus:
    """Counts for operators."""

    pending: int
    leased: int
    expired: int
    sessions: tuple[tuple[str, int], ...] = ()
    """(status, count) of the sessions in the store (archived ones keep their last status)."""


class WorkQueue(Protocol):
    """Sessions with work, claimed by at most one brain at a time."""

    async def wake(self, session_id: str, *, delay: float = 0.0) -> None:
        """Mark the session as having work, due after `delay` seconds."""
        ...

    async def claim(self, owner: str, lease_seconds: float) -> Fence | None:
        """Atomically take one due session whose lease is free or expired; bumps the token."""
        ...

    async def claim_many(self, owner: str, lease_seconds: float, limit: int) -> list[Fence]:
        """Like `claim`, for up to `limit` sessions in one round trip (bursts of wakes)."""
        ...

    async def heartbeat(self, fence: Fence, lease_seconds: float) -> bool:
        """Extend the lease; False when it was lost (expired and taken, or released)."""
        ...

    async def release(self, fence: Fence) -> None:
        """Give the session back; work that arrived meanwhile stays claimable."""
        ...

    async def wait_for_work(self, timeout: float) -> None:
        """Return early when a wake may have made work claimable (at once when one came
        since the last claim began), else after `timeout`."""
        ...

    async def queue_status(self) -> QueueStatus:
        """Pending, leased and expired counts, and sessions by status."""
        ...
