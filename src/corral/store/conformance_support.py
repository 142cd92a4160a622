"""Helpers shared by the conformance checks (`conformance`, `conformance_resources`).

No checks here, and nothing backend-specific.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio

from corral.ids import new_id
from corral.session.log import Fence, Signal, StoredEvent, Subscription
from corral.store.base import SessionRow, Store

Check = Callable[[Store], Awaitable[None]]
LONG_LEASE = 60.0
SHORT_LEASE = 0.2
PAST_SHORT_LEASE = 0.6


def event(kind: str = "user.message", **fields: Any) -> dict[str, Any]:
    """A wire event body with a fresh id."""
    return {"id": new_id("sevt"), "type": kind, **fields}


async def new_session(
    store: Store,
    initial: Sequence[dict[str, Any]] = (),
    *,
    session_id: str | None = None,
    agent_id: str = "agent_conformance",
    agent_version: int = 1,
    environment_id: str = "env_conformance",
    created_at: str = "2025-01-01T00:00:00.000000Z",
) -> str:
    """Create a session (waking it when `initial` is not empty); returns its id."""
    row = SessionRow(
        id=session_id or new_id("sesn"),
        created_at=created_at,
        environment_id=environment_id,
        agent_id=agent_id,
        agent_version=agent_version,
        body={"title": None, "metadata": {}},
    )
    await store.create_session(row, initial)
    return row.id


async def raises(kind: type[BaseException], awaitable: Awaitable[Any]) -> BaseException:
    """Await and return the `kind` error it must raise."""
    try:
        await awaitable
    except kind as caught:
        return caught
    raise AssertionError(f"expected {kind.__name__}")


async def signals_until(
    sub: Subscription, match: Callable[[Signal], bool], timeout: float = 10.0
) -> list[Signal]:
    """Every signal received up to and including the first one that matches."""
    seen: list[Signal] = []
    with anyio.fail_after(timeout):
        while True:
            batch = await sub.next(timeout)
            seen.extend(batch)
            if any(match(s) for s in batch):
                return seen


def seqs(events: Sequence[StoredEvent]) -> list[int]:
    """Sequence numbers of `events`."""
    return [e.seq for e in events]


async def claimed(store: Store, owner: str = "w1", lease: float = LONG_LEASE) -> Fence:
    """A claim that must succeed."""
    fence = await store.claim(owner, lease)
    assert fence is not None, "nothing claimable"
    return fence
