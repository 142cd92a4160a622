"""The `EventLog` contract: append-only, per-session sequence numbers, positional reads.

Durable before visible: an append returns (and subscribers hear of it) only after commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEvent:
    """An event as persisted: its position in the session's log and its wire body."""

    session_id: str
    seq: int
    body: dict[str, Any]
    """The wire event (`id`, `type`, `processed_at`, …), exactly as clients see it."""

    @property
    def id(self) -> str:
        """The event id clients dedupe by."""
        return str(self.body["id"])

    @property
    def type(self) -> str:
        """The wire `type`."""
        return str(self.body["type"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Fence:
    """A brain's claim on a session; appends under a stale fence are rejected."""

    session_id: str
    owner: str
    token: int
    takeover: bool = field(default=False, compare=False)
    """Claimed from another brain's expired lease (for the takeover metric only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EventQuery:
    """A positional slice of one session's log."""

    after_seq: int | None = None
    before_seq: int | None = None
    limit: int | None = None
    order: Literal["asc", "desc"] = "asc"
    types: Sequence[str] = ()
    created_gt: str | None = None
    created_gte: str | None = None
    created_lt: str | None = None
    created_lte: str | None = None
    internal: bool = False
    """Include the brain's internal events (`wire.events.INTERNAL_EVENT_TYPES`). Clients
    never see them, so only the brain sets this."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvents:
    """Signal: the session's log now ends at `last_seq`.

    `events` carries what was just committed when the appender is in this process, so an
    up-to-date follower needs no read; empty when the signal came from elsewhere.
    """

    last_seq: int
    events: tuple[StoredEvent, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Preview:
    """Signal: an ephemeral, never-stored preview (`event_start` / `event_delta`)."""

    body: dict[str, Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionGone:
    """Signal: the session was deleted; followers should close."""


Signal = NewEvents | Preview | SessionGone


@dataclass(slots=True)
class SessionSummary:
    """Columns of a session row kept current by `project()` in the append's transaction."""

    status: str = "idle"
    usage: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


class Subscription(Protocol):
    """A follower of one session's log."""

    async def next(self, timeout: float) -> list[Signal]:
        """Signals since the last call; `[]` after `timeout` seconds of silence."""
        ...

    def drain(self) -> list[Signal]:
        """Signals since the last call, without waiting (`[]` when none came)."""
        ...

    def close(self) -> None:
        """Stop following; idempotent."""
        ...


class EventLog(Protocol):
    """Durable per-session event logs."""

    async def append(
        self,
        session_id: str,
        events: Sequence[dict[str, Any]],
        *,
        fence: Fence | None = None,
        wake: bool = False,
    ) -> list[StoredEvent]:
        """Append `events` (wire bodies with `id` and `type`) atomically, in order.

        `fence` is checked inside the same transaction. `wake=True` also marks the session
        as having work for a brain, atomically with the append.

        Raises:
            LeaseLost: `fence` is not the session's current, unexpired lease.
            NotFound: no such session.
        """
        ...

    async def read(self, session_id: str, query: EventQuery) -> list[StoredEvent]:
        """A slice of the log in the asked order (no error for an unknown session)."""
        ...

    async def last_seq(self, session_id: str) -> int:
        """The sequence number of the last event (0 when empty)."""
        ...

    def subscribe(self, session_id: str) -> Subscription:
        """Follow a session: new-event signals (after commit), previews, deletion."""
        ...

    async def publish_preview(self, session_id: str, body: dict[str, Any]) -> None:
        """Send an ephemeral preview to the session's followers; never stored."""
        ...
