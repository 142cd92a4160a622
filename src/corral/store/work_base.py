"""The self-hosted work queue's contract (`WorkItems`) and its pure state transitions.

A work item asks a worker outside this server to serve one session's tool calls. Both
backends lock the item's row, call the transition here with the store's clock (SQLite: the
process's clock under the single writer; PostgreSQL: the database's clock), and write back the
columns it returns, so the rules live in one place:

    queued --poll--> queued (handed out; reclaimable after `reclaim_older_than_ms`)
    queued --ack--> starting --heartbeat--> active --stop--> stopping --stop(force)--> stopped
    starting/active/stopping --lease expires--> stopped (lease_lost: the worker is gone)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from corral.errors import Conflict, PreconditionFailed

WorkState = Literal["queued", "starting", "active", "stopping", "stopped"]
NO_HEARTBEAT = "NO_HEARTBEAT"
"""What a worker sends as `expected_last_heartbeat` to claim a lease nobody beat on yet."""
LEASED_STATES = ("starting", "active", "stopping")
POLLERS_WINDOW_SECONDS = 30.0
MAX_TTL_SECONDS = 3600

WORK_COLUMNS = (
    "id, environment_id, session_id, state, metadata, ttl_seconds, created_at, polled_at, "
    "acknowledged_at, started_at, latest_heartbeat_at, lease_expires, stop_requested_at, "
    "stopped_at, lease_lost"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkRow:
    """One stored work item; times are epoch seconds of the store's clock."""

    id: str
    environment_id: str
    session_id: str
    state: WorkState
    metadata: dict[str, str] = field(default_factory=dict)
    ttl_seconds: int
    created_at: float
    polled_at: float | None = None
    acknowledged_at: float | None = None
    started_at: float | None = None
    latest_heartbeat_at: float | None = None
    lease_expires: float | None = None
    stop_requested_at: float | None = None
    stopped_at: float | None = None
    lease_lost: bool = False

    @property
    def last_heartbeat(self) -> str | None:
        """The stored heartbeat in the exact text a worker echoes back."""
        return work_time(self.latest_heartbeat_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResult:
    """A successful heartbeat: the row after it and whether the lease was extended."""

    row: WorkRow
    lease_extended: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkStats:
    """Queue depth of one environment."""

    depth: int
    pending: int
    oldest_queued_at: float | None
    workers_polling: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvironmentKey:
    """An environment key's record (never the key)."""

    id: str
    environment_id: str
    key_hash: str
    created_at: str
    revoked_at: str | None = None


class WorkItems(Protocol):
    """The work queue and the credentials of self-hosted environments."""

    async def ensure_work(
        self, environment_id: str, session_id: str, ttl_seconds: int
    ) -> WorkRow | None:
        """Queue an item for the session unless one is live (not stopped); the new item or
        None. Wakes pollers of this process."""
        ...

    async def poll_work(
        self,
        environment_id: str,
        *,
        worker_id: str | None,
        reclaim_after: float,
        token_hash: str,
    ) -> WorkRow | None:
        """Hand out the oldest queued item never polled or polled more than `reclaim_after`
        seconds ago, remembering `token_hash` as its sessions token (replacing an earlier
        poll's); records `worker_id` as polling. Two polls never get one item at once."""
        ...

    async def wait_for_queued(self, timeout: float) -> None:
        """Return early when this process queued an item, else after `timeout`."""
        ...

    async def ack_work(self, environment_id: str, work_id: str) -> WorkRow:
        """queued -> starting, with a lease of the item's ttl. NotFound; Conflict if not queued."""
        ...

    async def heartbeat_work(
        self, environment_id: str, work_id: str, *, expected: str | None, ttl_seconds: int | None
    ) -> HeartbeatResult:
        """Extend the lease if `expected` is the stored heartbeat (see `heartbeat`).

        Raises:
            NotFound: no such item in this environment.
            PreconditionFailed: stale `expected`, an item never acked, or a lost lease.
        """
        ...

    async def stop_work(self, environment_id: str, work_id: str, *, force: bool) -> WorkRow:
        """Graceful (-> stopping) or forced (-> stopped). NotFound; Conflict if stopped."""
        ...

    async def get_work(self, work_id: str) -> WorkRow | None:
        """The item, in any environment."""
        ...

    async def list_work(
        self, environment_id: str, *, after_id: str | None, limit: int
    ) -> list[WorkRow]:
        """Items of an environment, newest first, `limit + 1` at most."""
        ...

    async def update_work_metadata(
        self, environment_id: str, work_id: str, patch: Mapping[str, str | None]
    ) -> WorkRow:
        """Apply a metadata patch (None deletes a key). NotFound."""
        ...

    async def work_stats(self, environment_id: str) -> WorkStats:
        """Depth, handed-out-but-unacked count, oldest queued, workers seen in the last 30 s."""
        ...

    async def work_token(self, work_id: str) -> tuple[WorkRow, str | None] | None:
        """The item and its sessions token hash, for authenticating a sessions token."""
        ...

    async def live_work_for_session(self, session_id: str) -> WorkRow | None:
        """The session's live item, if any."""
        ...

    async def expire_work(self) -> list[WorkRow]:
        """Stop items whose lease expired (lease_lost) and return every lost item whose
        session has not been told yet (see `mark_lost_reported`)."""
        ...

    async def mark_lost_reported(self, work_id: str) -> None:
        """The session's log now records the loss of `work_id`."""
        ...

    async def add_environment_key(self, key: EnvironmentKey) -> None:
        """Store a new key record."""
        ...

    async def get_environment_key(self, key_id: str) -> EnvironmentKey | None:
        """A key record, revoked or not."""
        ...

    async def list_environment_keys(self, environment_id: str) -> list[EnvironmentKey]:
        """An environment's key records, oldest first."""
        ...

    async def revoke_environment_key(self, key_id: str, revoked_at: str) -> bool:
        """Revoke; False when no such key or already revoked."""
        ...


def work_time(epoch: float | None) -> str | None:
    """RFC 3339 (microseconds, `Z`) of a stored time: the same text for the same value."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def token_hash(token: str) -> str:
    """How a bearer secret is kept (keys and tokens are random, so no salt or stretching)."""
    return hashlib.sha256(token.encode()).hexdigest()


def row_from(values: tuple[Any, ...] | list[Any], metadata: dict[str, str]) -> WorkRow:
    """A `WorkRow` from a row selected as `WORK_COLUMNS` (metadata already decoded)."""
    (wid, env, sid, state, _, ttl, created, polled, acked, started, beat, expires, asked, stopped,
     lost) = values  # fmt: skip
    return WorkRow(
        id=wid,
        environment_id=env,
        session_id=sid,
        state=state,
        metadata=metadata,
        ttl_seconds=int(ttl),
        created_at=float(created),
        polled_at=_f(polled),
        acknowledged_at=_f(acked),
        started_at=_f(started),
        latest_heartbeat_at=_f(beat),
        lease_expires=_f(expires),
        stop_requested_at=_f(asked),
        stopped_at=_f(stopped),
        lease_lost=bool(lost),
    )


def _f(value: Any) -> float | None:
    return None if value is None else float(value)


def ack(row: WorkRow, now: float) -> dict[str, Any]:
    """Columns to write for an ack: the item leaves the queue with a first lease."""
    if row.state != "queued":
        raise Conflict(f"work {row.id} is {row.state}, not queued", should_retry=False)
    return {
        "state": "starting",
        "acknowledged_at": now,
        "polled_at": None,
        "lease_expires": now + row.ttl_seconds,
    }


def heartbeat(
    row: WorkRow, expected: str | None, ttl_seconds: int | None, now: float
) -> tuple[dict[str, Any], bool]:
    """Columns to write for a heartbeat and whether the lease is extended.

    `expected` must equal the stored heartbeat (`NO_HEARTBEAT` when there is none) unless the
    item is stopping or stopped. A lost lease, or an item never acked, is a 412 whatever was
    expected: its worker must stop serving it.
    """
    if row.lease_lost or row.state == "queued":
        raise _lease_state_error(row, "the work item's lease is not held")
    if row.state == "stopped":
        return {}, False
    stored = row.last_heartbeat or NO_HEARTBEAT
    if row.state != "stopping" and expected is not None and expected != stored:
        raise _lease_state_error(row, "expected_last_heartbeat does not match the stored one")
    ttl = row.ttl_seconds if ttl_seconds is None else ttl_seconds
    updates: dict[str, Any] = {
        "latest_heartbeat_at": now,
        "lease_expires": now + ttl,
        "ttl_seconds": ttl,
    }
    if row.state == "starting":
        updates["state"] = "active"
        updates["started_at"] = now
    return updates, True


def _lease_state_error(row: WorkRow, message: str) -> PreconditionFailed:
    return PreconditionFailed(
        message,
        error_code="heartbeat_precondition_failed",
        details={
            "current_state": {
                "last_heartbeat": row.last_heartbeat,
                "lease_extended": False,
                "state": row.state,
                "ttl_seconds": row.ttl_seconds,
            }
        },
        should_retry=False,
    )


def stop(row: WorkRow, force: bool, now: float) -> dict[str, Any]:
    """Columns to write for a stop. An item nobody acked has no worker to tell: it stops."""
    if row.state == "stopped":
        raise Conflict(f"work {row.id} is already stopped", should_retry=False)
    asked = row.stop_requested_at if row.stop_requested_at is not None else now
    if force or row.state == "queued":
        return {"state": "stopped", "stopped_at": now, "stop_requested_at": asked}
    return {"state": "stopping", "stop_requested_at": asked}


def patched(metadata: Mapping[str, str], patch: Mapping[str, str | None]) -> dict[str, str]:
    """`metadata` with `patch` applied: a string upserts, None deletes."""
    out = dict(metadata)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
