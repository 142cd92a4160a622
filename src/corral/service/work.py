"""The self-hosted work queue as the API serves it, and the credentials of its workers.

Two bearer credentials exist besides API keys (see docs/self_hosted.md):

- an **environment key** `corral-ek.<key id>.<secret>`, created by the operator
  (`corral env-key create`), stored as a SHA-256 and revocable; it polls and acks its
  environment's work and may act on that environment's sessions;
- a **sessions token** `corral-st.<work id>.<secret>`, minted by each poll that hands out an
  item (inside the item's `secret`), stored as a SHA-256 on the item and valid only for that
  item's session while the item is not stopped and no later poll replaced it.
"""

from __future__ import annotations

import base64
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

import anyio

from corral.errors import BadRequest, NotFound, Unauthorized
from corral.ids import new_id, now_rfc3339
from corral.store.base import Store
from corral.store.work_base import EnvironmentKey, WorkItems, WorkRow, token_hash, work_time

ENV_KEY_PREFIX = "corral-ek"
SESSIONS_TOKEN_PREFIX = "corral-st"
DEFAULT_RECLAIM_MS = 5000
MAX_LIST_LIMIT = 100


@dataclass(frozen=True, slots=True)
class EnvironmentPrincipal:
    """A request made with an environment key."""

    environment_id: str
    key_id: str


@dataclass(frozen=True, slots=True)
class SessionPrincipal:
    """A request made with a live work item's sessions token."""

    environment_id: str
    session_id: str
    work_id: str
    live: bool = True
    """False once the item stopped: the token then only reaches its own item's heartbeat,
    which answers 412 to a worker whose lease was lost (see `api.work.WorkerAuth`)."""


Principal = EnvironmentPrincipal | SessionPrincipal


def render_work(row: WorkRow, secret: str | None = None) -> dict[str, Any]:
    """The wire `work` object; `secret` only on the poll that handed it out."""
    return {
        "id": row.id,
        "type": "work",
        "environment_id": row.environment_id,
        "data": {"type": "session", "id": row.session_id},
        "state": row.state,
        "secret": secret,
        "metadata": row.metadata,
        "created_at": work_time(row.created_at),
        "acknowledged_at": work_time(row.acknowledged_at),
        "started_at": work_time(row.started_at),
        "latest_heartbeat_at": work_time(row.latest_heartbeat_at),
        "stop_requested_at": work_time(row.stop_requested_at),
        "stopped_at": work_time(row.stopped_at),
    }


class WorkService:
    """Poll, lease and stop work items; issue and check worker credentials."""

    def __init__(self, store: Store, work: WorkItems, *, ttl_seconds: int) -> None:
        self.store = store
        self.work = work
        self.ttl_seconds = ttl_seconds

    async def _environment(self, environment_id: str) -> None:
        env = await self.store.get_resource("environment", environment_id)
        if env is None:
            raise NotFound(
                f"environment {environment_id} not found", error_code="environment_not_found"
            )
        if env.body["config"]["type"] != "self_hosted":
            raise BadRequest(f"environment {environment_id} is not self_hosted")

    async def poll(
        self,
        environment_id: str,
        *,
        block_ms: int | None,
        reclaim_older_than_ms: int | None,
        worker_id: str | None,
    ) -> dict[str, Any] | None:
        """One item with its `secret`, or None when nothing is available within `block_ms`."""
        if block_ms is not None and not 1 <= block_ms <= 999:
            raise BadRequest("block_ms: must be between 1 and 999")
        reclaim = DEFAULT_RECLAIM_MS if reclaim_older_than_ms is None else reclaim_older_than_ms
        if reclaim < 0:
            raise BadRequest("reclaim_older_than_ms: must not be negative")
        if worker_id is not None and not 0 < len(worker_id) <= 256:
            raise BadRequest("Anthropic-Worker-ID: must be 1 to 256 characters")
        await self._environment(environment_id)
        if not block_ms:  # non-blocking: one look (a zero deadline would cancel even that)
            return await self._poll_once(environment_id, worker_id, reclaim / 1000)
        with anyio.move_on_after(block_ms / 1000):
            while True:
                # Shielded: an item handed out as the deadline passes is still returned,
                # not left polled-but-lost until it is reclaimed.
                with anyio.CancelScope(shield=True):
                    found = await self._poll_once(environment_id, worker_id, reclaim / 1000)
                if found is not None:
                    return found
                await self.work.wait_for_queued(block_ms / 1000)
        return None

    async def _poll_once(
        self, environment_id: str, worker_id: str | None, reclaim: float
    ) -> dict[str, Any] | None:
        secret = secrets.token_urlsafe(32)
        row = await self.work.poll_work(
            environment_id,
            worker_id=worker_id,
            reclaim_after=reclaim,
            token_hash=token_hash(secret),
        )
        if row is None:
            return None
        token = f"{SESSIONS_TOKEN_PREFIX}.{row.id}.{secret}"
        payload = json.dumps({"sessions_token": token}).encode()
        return render_work(row, base64.urlsafe_b64encode(payload).decode().rstrip("="))

    async def ack(self, environment_id: str, work_id: str) -> dict[str, Any]:
        """queued -> starting."""
        return render_work(await self.work.ack_work(environment_id, work_id))

    async def heartbeat(
        self, environment_id: str, work_id: str, *, expected: str | None, ttl: int | None
    ) -> dict[str, Any]:
        """Extend the lease; 412 `heartbeat_precondition_failed` when the caller's view is stale."""
        if ttl is not None and not 1 <= ttl <= 3600:
            raise BadRequest("desired_ttl_seconds: must be between 1 and 3600")
        result = await self.work.heartbeat_work(
            environment_id, work_id, expected=expected, ttl_seconds=ttl
        )
        return {
            "type": "work_heartbeat",
            "last_heartbeat": result.row.last_heartbeat or "",
            "lease_extended": result.lease_extended,
            "state": result.row.state,
            "ttl_seconds": result.row.ttl_seconds,
        }

    async def stop(self, environment_id: str, work_id: str, *, force: bool) -> dict[str, Any]:
        """Graceful (-> stopping) or forced (-> stopped); 409 when already stopped."""
        return render_work(await self.work.stop_work(environment_id, work_id, force=force))

    async def stats(self, environment_id: str) -> dict[str, Any]:
        """`work_queue_stats`."""
        await self._environment(environment_id)
        stats = await self.work.work_stats(environment_id)
        return {
            "type": "work_queue_stats",
            "depth": stats.depth,
            "pending": stats.pending,
            "oldest_queued_at": work_time(stats.oldest_queued_at),
            "workers_polling": stats.workers_polling,
        }

    async def list(self, environment_id: str, *, limit: int | None, page: str | None) -> Any:
        """Newest first; `page` is the previous page's `next_page`."""
        size = 20 if limit is None else limit
        if not 1 <= size <= MAX_LIST_LIMIT:
            raise BadRequest(f"limit: must be between 1 and {MAX_LIST_LIMIT}")
        if page is not None and not page.startswith("work_"):
            raise BadRequest("page: invalid cursor")
        await self._environment(environment_id)
        rows = await self.work.list_work(environment_id, after_id=page, limit=size)
        shown = rows[:size]
        more = len(rows) > size and bool(shown)
        return {
            "data": [render_work(r) for r in shown],
            "next_page": shown[-1].id if more else None,
        }

    async def retrieve(self, environment_id: str, work_id: str) -> dict[str, Any]:
        """One item (never its secret)."""
        row = await self.work.get_work(work_id)
        if row is None or row.environment_id != environment_id:
            raise NotFound(f"work {work_id} not found in environment {environment_id}")
        return render_work(row)

    async def update(
        self, environment_id: str, work_id: str, metadata: dict[str, str | None]
    ) -> dict[str, Any]:
        """Patch metadata."""
        return render_work(await self.work.update_work_metadata(environment_id, work_id, metadata))

    # ---- credentials -------------------------------------------------------------------

    async def create_key(self, environment_id: str) -> tuple[EnvironmentKey, str]:
        """A new environment key: its record and the key itself (shown once, never stored)."""
        await self._environment(environment_id)
        key_id = new_id("envkey")
        secret = secrets.token_urlsafe(32)
        key = f"{ENV_KEY_PREFIX}.{key_id}.{secret}"
        record = EnvironmentKey(
            id=key_id,
            environment_id=environment_id,
            key_hash=token_hash(secret),
            created_at=now_rfc3339(),
        )
        await self.work.add_environment_key(record)
        return record, key

    async def authenticate(self, token: str) -> Principal | None:
        """The principal a worker credential names, or None when it is not one of ours.

        A stopped item's sessions token authenticates with `live=False` (the caller refuses
        everything but its heartbeat).

        Raises:
            Unauthorized: it is shaped like one of ours but is unknown, revoked or replaced.
        """
        kind, _, rest = token.partition(".")
        ident, _, secret = rest.partition(".")
        if kind == ENV_KEY_PREFIX:
            return await self._environment_key(ident, secret)
        if kind == SESSIONS_TOKEN_PREFIX:
            return await self._sessions_token(ident, secret)
        return None

    async def _environment_key(self, key_id: str, secret: str) -> EnvironmentPrincipal:
        record = await self.work.get_environment_key(key_id) if key_id else None
        if record is None or not _same(record.key_hash, secret):
            raise Unauthorized("invalid environment key")
        if record.revoked_at is not None:
            raise Unauthorized("this environment key was revoked")
        return EnvironmentPrincipal(environment_id=record.environment_id, key_id=record.id)

    async def _sessions_token(self, work_id: str, secret: str) -> SessionPrincipal:
        found = await self.work.work_token(work_id) if work_id.startswith("work_") else None
        if found is None or found[1] is None or not _same(found[1], secret):
            raise Unauthorized("invalid sessions token")
        row = found[0]
        return SessionPrincipal(
            environment_id=row.environment_id,
            session_id=row.session_id,
            work_id=row.id,
            live=row.state != "stopped",
        )


def _same(stored_hash: str, secret: str) -> bool:
    return hmac.compare_digest(stored_hash, token_hash(secret))
