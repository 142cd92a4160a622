"""Conformance checks of the self-hosted work queue (`WorkItems`), run against every backend."""

from __future__ import annotations

import anyio

from corral.errors import Conflict, NotFound, PreconditionFailed
from corral.ids import new_id, now_rfc3339
from corral.store.base import Store
from corral.store.conformance_support import Check, raises
from corral.store.work import work_items_for
from corral.store.work_base import (
    NO_HEARTBEAT,
    EnvironmentKey,
    WorkItems,
    WorkRow,
    token_hash,
)

ENV = "env_work"
OTHER_ENV = "env_other"
TTL = 90
RECLAIM = 5.0


async def _queued(work: WorkItems, env: str = ENV, ttl: int = TTL) -> WorkRow:
    row = await work.ensure_work(env, new_id("sesn"), ttl)
    assert row is not None and row.state == "queued"
    return row


async def _poll(work: WorkItems, env: str = ENV, reclaim: float = RECLAIM) -> WorkRow | None:
    return await work.poll_work(env, worker_id="w", reclaim_after=reclaim, token_hash="h")


async def _leased(work: WorkItems, ttl: int = TTL) -> WorkRow:
    row = await _queued(work, ttl=ttl)
    assert await _poll(work) is not None
    await work.ack_work(ENV, row.id)
    beat = await work.heartbeat_work(ENV, row.id, expected=NO_HEARTBEAT, ttl_seconds=None)
    return beat.row


async def check_one_live_item_per_session(store: Store) -> None:
    work = work_items_for(store)
    session = new_id("sesn")
    first = await work.ensure_work(ENV, session, TTL)
    assert first is not None
    assert await work.ensure_work(ENV, session, TTL) is None
    assert (await work.live_work_for_session(session)) == first
    await work.stop_work(ENV, first.id, force=True)
    assert await work.live_work_for_session(session) is None
    again = await work.ensure_work(ENV, session, TTL)
    assert again is not None and again.id != first.id


async def check_poll_hands_out_oldest_once(store: Store) -> None:
    work = work_items_for(store)
    assert await _poll(work) is None
    first, second = await _queued(work), await _queued(work)
    await _queued(work, env=OTHER_ENV)
    got = [await _poll(work), await _poll(work), await _poll(work)]
    assert [g.id if g else None for g in got] == [first.id, second.id, None]
    assert got[0] is not None and got[0].polled_at is not None and got[0].state == "queued"


async def check_unacked_items_are_reclaimed(store: Store) -> None:
    work = work_items_for(store)
    row = await _queued(work)
    assert await _poll(work, reclaim=0.2) is not None
    assert await _poll(work, reclaim=0.2) is None
    await anyio.sleep(0.4)
    again = await _poll(work, reclaim=0.2)
    assert again is not None and again.id == row.id
    found = await work.work_token(row.id)
    assert found is not None and found[1] == "h"


async def check_ack_takes_the_item_off_the_queue(store: Store) -> None:
    work = work_items_for(store)
    row = await _queued(work)
    await raises(NotFound, work.ack_work(OTHER_ENV, row.id))
    acked = await work.ack_work(ENV, row.id)
    assert acked.state == "starting" and acked.acknowledged_at is not None
    assert acked.lease_expires is not None
    await raises(Conflict, work.ack_work(ENV, row.id))
    assert await _poll(work, reclaim=0.0) is None


async def check_heartbeat_is_optimistic(store: Store) -> None:
    work = work_items_for(store)
    row = await _queued(work)
    refused = await raises(
        PreconditionFailed,
        work.heartbeat_work(ENV, row.id, expected=NO_HEARTBEAT, ttl_seconds=None),
    )
    assert isinstance(refused, PreconditionFailed)
    assert refused.details["current_state"]["state"] == "queued"
    await work.ack_work(ENV, row.id)
    first = await work.heartbeat_work(ENV, row.id, expected=NO_HEARTBEAT, ttl_seconds=30)
    assert first.lease_extended and first.row.state == "active" and first.row.ttl_seconds == 30
    assert first.row.last_heartbeat is not None
    stale = await raises(
        PreconditionFailed,
        work.heartbeat_work(ENV, row.id, expected=NO_HEARTBEAT, ttl_seconds=None),
    )
    assert isinstance(stale, PreconditionFailed)
    state = stale.details["current_state"]
    assert state["last_heartbeat"] == first.row.last_heartbeat and state["lease_extended"] is False
    second = await work.heartbeat_work(
        ENV, row.id, expected=first.row.last_heartbeat, ttl_seconds=None
    )
    assert second.lease_extended and second.row.last_heartbeat != first.row.last_heartbeat
    await raises(NotFound, work.heartbeat_work(OTHER_ENV, row.id, expected=None, ttl_seconds=None))


async def check_stop_graceful_then_forced(store: Store) -> None:
    work = work_items_for(store)
    row = await _leased(work)
    stopping = await work.stop_work(ENV, row.id, force=False)
    assert stopping.state == "stopping" and stopping.stop_requested_at is not None
    beat = await work.heartbeat_work(ENV, row.id, expected="whatever", ttl_seconds=None)
    assert beat.row.state == "stopping"
    stopped = await work.stop_work(ENV, row.id, force=True)
    assert stopped.state == "stopped" and stopped.stopped_at is not None
    await raises(Conflict, work.stop_work(ENV, row.id, force=True))
    after = await work.heartbeat_work(ENV, row.id, expected="whatever", ttl_seconds=None)
    assert after.row.state == "stopped" and not after.lease_extended
    queued = await _queued(work)
    assert (await work.stop_work(ENV, queued.id, force=False)).state == "stopped"


async def check_expired_leases_are_lost_once(store: Store) -> None:
    work = work_items_for(store)
    row = await _leased(work, ttl=1)
    kept = await _leased(work)
    assert await work.expire_work() == []
    await anyio.sleep(1.3)
    lost = await work.expire_work()
    assert [r.id for r in lost] == [row.id]
    assert lost[0].state == "stopped" and lost[0].lease_lost
    refused = await raises(
        PreconditionFailed,
        work.heartbeat_work(ENV, row.id, expected=lost[0].last_heartbeat, ttl_seconds=None),
    )
    assert isinstance(refused, PreconditionFailed)
    await work.mark_lost_reported(row.id)
    assert await work.expire_work() == []
    assert (await work.get_work(kept.id)) == kept
    assert await work.ensure_work(ENV, row.session_id, TTL) is not None


async def check_stats_and_pollers(store: Store) -> None:
    work = work_items_for(store)
    empty = await work.work_stats(ENV)
    assert (empty.depth, empty.pending, empty.oldest_queued_at) == (0, 0, None)
    first = await _queued(work)
    await _queued(work)
    await work.poll_work(ENV, worker_id="a", reclaim_after=RECLAIM, token_hash="h")
    await work.poll_work(ENV, worker_id="b", reclaim_after=RECLAIM, token_hash="h")
    await work.poll_work(ENV, worker_id="b", reclaim_after=RECLAIM, token_hash="h")
    stats = await work.work_stats(ENV)
    assert (stats.depth, stats.pending, stats.workers_polling) == (0, 2, 2)
    assert stats.oldest_queued_at == first.created_at
    assert (await work.work_stats(OTHER_ENV)).workers_polling == 0


async def check_list_and_metadata(store: Store) -> None:
    work = work_items_for(store)
    rows = [await _queued(work) for _ in range(3)]
    page = await work.list_work(ENV, after_id=None, limit=2)
    assert [r.id for r in page] == [r.id for r in reversed(rows)]
    rest = await work.list_work(ENV, after_id=page[1].id, limit=2)
    assert [r.id for r in rest] == [rows[0].id]
    updated = await work.update_work_metadata(ENV, rows[0].id, {"a": "1", "b": "2"})
    assert updated.metadata == {"a": "1", "b": "2"}
    updated = await work.update_work_metadata(ENV, rows[0].id, {"a": None, "c": "3"})
    assert updated.metadata == {"b": "2", "c": "3"}
    await raises(NotFound, work.update_work_metadata(OTHER_ENV, rows[0].id, {"a": "1"}))


async def check_concurrent_polls_never_share_an_item(store: Store) -> None:
    work, other = work_items_for(store), work_items_for(store)
    for trial in range(100):
        env = f"env_race_{trial}"
        await work.ensure_work(env, new_id("sesn"), TTL)
        got: list[WorkRow | None] = []

        async def poll(
            queue: WorkItems, worker: str, env: str = env, got: list[WorkRow | None] = got
        ) -> None:
            token = token_hash(worker)
            got.append(
                await queue.poll_work(
                    env, worker_id=worker, reclaim_after=RECLAIM, token_hash=token
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll, work, "w1")
            tg.start_soon(poll, other, "w2")
        assert sorted(g is not None for g in got) == [False, True], f"trial {trial}: {got}"


async def check_environment_keys(store: Store) -> None:
    work = work_items_for(store)
    key = EnvironmentKey(
        id=new_id("envkey"), environment_id=ENV, key_hash=token_hash("k"), created_at=now_rfc3339()
    )
    await work.add_environment_key(key)
    assert await work.get_environment_key(key.id) == key
    assert [k.id for k in await work.list_environment_keys(ENV)] == [key.id]
    assert await work.list_environment_keys(OTHER_ENV) == []
    assert await work.revoke_environment_key(key.id, now_rfc3339())
    assert not await work.revoke_environment_key(key.id, now_rfc3339())
    revoked = await work.get_environment_key(key.id)
    assert revoked is not None and revoked.revoked_at is not None
    assert await work.get_environment_key("envkey_missing") is None


WORK_CHECKS: list[Check] = [
    check_one_live_item_per_session,
    check_poll_hands_out_oldest_once,
    check_unacked_items_are_reclaimed,
    check_ack_takes_the_item_off_the_queue,
    check_heartbeat_is_optimistic,
    check_stop_graceful_then_forced,
    check_expired_leases_are_lost_once,
    check_stats_and_pollers,
    check_list_and_metadata,
    check_concurrent_polls_never_share_an_item,
    check_environment_keys,
]
