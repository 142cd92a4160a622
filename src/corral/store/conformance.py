"""The `Store` contract as executable checks: every backend must pass all of `ALL_CHECKS`.

Each check is `async def check_xxx(store)` on a fresh, open store and raises AssertionError
on a violation. Plain functions, no test framework: any runner (pytest, `corral`) can call them.
This module covers the event log and the wake queue; `conformance_calls` the tool-call
projection and checked appends; `conformance_resources` the rest.
"""

from __future__ import annotations

import anyio

from corral.errors import Conflict, LeaseLost, NotFound
from corral.ids import new_id
from corral.session.log import (
    EventQuery,
    Fence,
    NewEvents,
    Preview,
    SessionGone,
    Signal,
    StoredEvent,
)
from corral.store.base import Page, SessionFilter, SessionRow, Store
from corral.store.conformance_calls import CALL_CHECKS
from corral.store.conformance_memory import MEMORY_CHECKS
from corral.store.conformance_resources import RESOURCE_CHECKS
from corral.store.conformance_support import (
    LONG_LEASE,
    PAST_SHORT_LEASE,
    SHORT_LEASE,
    Check,
    claimed,
    event,
    new_session,
    raises,
    seqs,
    signals_until,
)

# ---- event log -------------------------------------------------------------------------


async def check_append_numbers_events(store: Store) -> None:
    """Appends return their events numbered 1, 2, … in order, with `processed_at` set."""
    sid = await new_session(store)
    assert await store.last_seq(sid) == 0
    first = await store.append(sid, [event(), event("user.interrupt"), event()])
    assert seqs(first) == [1, 2, 3]
    assert all(e.session_id == sid and e.body["processed_at"] for e in first)
    kept = event(processed_at="2025-01-01T00:00:00.000000Z")
    second = await store.append(sid, [kept])
    assert seqs(second) == [4] and second[0].body["processed_at"] == kept["processed_at"]
    assert await store.append(sid, []) == []
    assert await store.last_seq(sid) == 4
    log = await store.read(sid, EventQuery())
    assert [e.body for e in log] == [e.body for e in first + second]


async def check_positional_reads(store: Store) -> None:
    """Reads slice by position: after/before, limit, order and type filters."""
    sid = await new_session(store)
    kinds = ["user.message", "agent.message"] * 5
    stored = await store.append(sid, [event(k) for k in kinds])
    assert seqs(await store.read(sid, EventQuery())) == list(range(1, 11))
    assert seqs(await store.read(sid, EventQuery(after_seq=3, limit=2))) == [4, 5]
    assert seqs(await store.read(sid, EventQuery(order="desc"))) == list(range(10, 0, -1))
    desc = EventQuery(before_seq=8, limit=3, order="desc")
    assert seqs(await store.read(sid, desc)) == [7, 6, 5]
    window = EventQuery(after_seq=2, before_seq=6)
    assert seqs(await store.read(sid, window)) == [3, 4, 5]
    assert seqs(await store.read(sid, EventQuery(after_seq=10))) == []
    typed = await store.read(sid, EventQuery(types=["agent.message"], order="desc", limit=2))
    assert seqs(typed) == [10, 8] and {e.type for e in typed} == {"agent.message"}
    both = await store.read(sid, EventQuery(types=["user.message", "agent.message"]))
    assert len(both) == 10
    assert [e.id for e in await store.read(sid, EventQuery(limit=1))] == [stored[0].id]
    assert await store.read(new_id("sesn"), EventQuery()) == []
    assert await store.last_seq(new_id("sesn")) == 0


async def check_long_ascending_reads(store: Store) -> None:
    """A slice longer than any batch a store reads at once comes back whole and in order,
    with limits, bounds and filters applied across the whole of it."""
    sid = await new_session(store)
    await store.append(sid, [event(k) for k in ["user.message", "agent.message"] * 30])
    assert seqs(await store.read(sid, EventQuery())) == list(range(1, 61))
    for limit in (1, 15, 16, 17, 31, 32, 33, 60, 61):
        assert seqs(await store.read(sid, EventQuery(limit=limit))) == list(range(1, 61))[:limit]
    after = EventQuery(after_seq=5, before_seq=50, limit=40)
    assert seqs(await store.read(sid, after)) == list(range(6, 46))
    typed = await store.read(sid, EventQuery(types=["agent.message"], after_seq=2))
    assert seqs(typed) == list(range(4, 61, 2))


async def check_internal_events_hidden(store: Store) -> None:
    """Internal brain events are kept in the log but only an `internal=True` read returns
    them; a paging client still sees every public event, in order, across the gaps."""
    sid = await new_session(store)
    kinds = ["user.message", "corral.log_format", "agent.message", "corral.tool_started"] * 3
    await store.append(sid, [event(k) for k in kinds])
    public = [1, 3, 5, 7, 9, 11]
    assert seqs(await store.read(sid, EventQuery())) == public
    assert seqs(await store.read(sid, EventQuery(internal=True))) == list(range(1, 13))
    assert seqs(await store.read(sid, EventQuery(after_seq=3, limit=2))) == [5, 7]
    assert seqs(await store.read(sid, EventQuery(before_seq=9, limit=2, order="desc"))) == [7, 5]
    typed = EventQuery(types=["agent.message", "corral.tool_started"])
    assert seqs(await store.read(sid, typed)) == [3, 7, 11]
    assert await store.last_seq(sid) == 12


async def check_created_filters(store: Store) -> None:
    """`created_*` bounds compare against the append time (the stored `processed_at`)."""
    sid = await new_session(store)
    (one,) = await store.append(sid, [event()])
    await anyio.sleep(0.01)
    (two,) = await store.append(sid, [event()])
    t1, t2 = one.body["processed_at"], two.body["processed_at"]
    assert t1 < t2
    assert seqs(await store.read(sid, EventQuery(created_gt=t1))) == [2]
    assert seqs(await store.read(sid, EventQuery(created_gte=t1))) == [1, 2]
    assert seqs(await store.read(sid, EventQuery(created_lt=t2))) == [1]
    assert seqs(await store.read(sid, EventQuery(created_lte=t2))) == [1, 2]
    assert seqs(await store.read(sid, EventQuery(created_gt=t2))) == []


async def check_unknown_session(store: Store) -> None:
    """Appending to an unknown session is NotFound and wakes nothing."""
    await raises(NotFound, store.append(new_id("sesn"), [event()]))
    await raises(NotFound, store.append(new_id("sesn"), [event()], wake=True))
    assert await store.claim("w1", LONG_LEASE) is None


async def check_concurrent_appends(store: Store) -> None:
    """Many concurrent appenders: one gap-free sequence, each batch contiguous and whole."""
    sid = await new_session(store)
    batches: list[list[StoredEvent]] = []

    async def writer(n: int) -> None:
        for i in range(5):
            batches.append(await store.append(sid, [event() for _ in range(1 + (n + i) % 3)]))

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(writer, n)
    total = sum(len(b) for b in batches)
    log = await store.read(sid, EventQuery())
    assert seqs(log) == list(range(1, total + 1))
    for batch in batches:
        assert seqs(batch) == list(range(batch[0].seq, batch[0].seq + len(batch)))
    assert {e.id for b in batches for e in b} == {e.id for e in log}
    assert await store.last_seq(sid) == total


async def check_projection(store: Store) -> None:
    """Status, usage and active time on the session row follow the appended events."""
    sid = await new_session(store)
    row = await store.get_session(sid)
    assert row is not None and row.summary.status == "idle"
    usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 2,
        "cache_creation_input_tokens": 3,
    }
    await store.append(
        sid,
        [
            event("session.status_running", processed_at="2025-01-01T00:00:00.000000Z"),
            event("span.model_request_end", model_usage=usage),
        ],
    )
    row = await store.get_session(sid)
    assert row is not None and row.summary.status == "running"
    await store.append(
        sid,
        [
            event("span.model_request_end", model_usage={"input_tokens": 1}),
            event(
                "session.status_idle",
                processed_at="2025-01-01T00:00:02.000000Z",
                stop_reason={"type": "end_turn"},
            ),
        ],
    )
    row = await store.get_session(sid)
    assert row is not None and row.summary.status == "idle"
    got = row.summary.usage
    assert (got["input_tokens"], got["output_tokens"], got["cache_read_input_tokens"]) == (11, 5, 2)
    assert got["cache_creation"] == {"ephemeral_5m_input_tokens": 3}
    assert got["active_seconds"] == 2.0
    await store.append(sid, [event("session.status_terminated")])
    row = await store.get_session(sid)
    assert row is not None and row.summary.status == "terminated"


async def check_subscribe_after_commit(store: Store) -> None:
    """A follower hears of new events only once they are readable."""
    sid = await new_session(store)
    sub = store.subscribe(sid)
    try:
        await store.append(sid, [event(), event()])

        def is_new(s: Signal) -> bool:
            return isinstance(s, NewEvents) and s.last_seq >= 2

        await signals_until(sub, is_new)
        assert seqs(await store.read(sid, EventQuery())) == [1, 2]
    finally:
        sub.close()
        sub.close()


async def check_previews(store: Store) -> None:
    """Previews reach followers in order and are never stored."""
    sid = await new_session(store)
    sub = store.subscribe(sid)
    bodies = [
        {"type": "event_start", "event": {"type": "agent.message", "id": "sevt_p"}},
        {"type": "event_delta", "event_id": "sevt_p", "delta": {"type": "content_delta"}},
    ]
    try:
        for body in bodies:
            await store.publish_preview(sid, body)
        seen = await signals_until(sub, lambda s: isinstance(s, Preview) and s.body == bodies[-1])
        assert [s.body for s in seen if isinstance(s, Preview)] == bodies
        assert await store.read(sid, EventQuery()) == []
    finally:
        sub.close()


async def check_delete_session(store: Store) -> None:
    """Deleting removes row, log and work; followers get SessionGone."""
    sid = await new_session(store, [event()])
    sub = store.subscribe(sid)
    try:
        assert await store.delete_session(sid) is True
        await signals_until(sub, lambda s: isinstance(s, SessionGone))
    finally:
        sub.close()
    assert await store.get_session(sid) is None
    assert await store.read(sid, EventQuery()) == []
    assert await store.last_seq(sid) == 0
    await raises(NotFound, store.append(sid, [event()]))
    assert await store.delete_session(sid) is False
    assert await store.claim("w1", LONG_LEASE) is None


async def check_child_threads(store: Store) -> None:
    """A child thread is a session row with a parent: listed only under its parent, with a
    log of its own; event ids are unique per log, so a cross-post may keep its id."""
    parent = await new_session(store)
    child = SessionRow(
        id=new_id("sthr"),
        created_at="2025-01-01T00:00:01.000000Z",
        environment_id="env_conformance",
        agent_id="agent_conformance",
        agent_version=1,
        body={},
        parent_id=parent,
    )
    first = event()
    await store.create_session(child, [first])
    got = await store.get_session(child.id)
    assert got is not None and got.parent_id == parent
    listed = await store.list_sessions(Page(limit=100, include_archived=True), SessionFilter())
    assert parent in {r.id for r in listed} and child.id not in {r.id for r in listed}
    children = await store.list_sessions(Page(limit=10), SessionFilter(parent_id=parent))
    assert [r.id for r in children] == [child.id]
    assert await store.claim("w1", LONG_LEASE) is not None  # its own work row
    await store.append(parent, [dict(first)])  # the same id on another log: a cross-post
    await raises(Conflict, store.append(parent, [dict(first)]))  # but once per log
    assert [e.body["id"] for e in await store.read(parent, EventQuery())] == [first["id"]]


# ---- wake queue and fencing -------------------------------------------------------------


async def check_stale_fence_rejected(store: Store) -> None:
    """Appends under another owner's or an older token are rejected and leave no trace."""
    sid = await new_session(store, [event()])
    fence = await claimed(store)
    assert fence.session_id == sid and fence.token >= 1
    assert seqs(await store.append(sid, [event()], fence=fence)) == [2]
    for stale in (
        Fence(session_id=sid, owner=fence.owner, token=fence.token - 1),
        Fence(session_id=sid, owner="w2", token=fence.token),
    ):
        await raises(LeaseLost, store.append(sid, [event()], fence=stale))
    await store.release(fence)
    await raises(LeaseLost, store.append(sid, [event()], fence=fence))
    assert await store.last_seq(sid) == 2


async def check_expired_lease_rejected(store: Store) -> None:
    """An append under a lease past its expiry is rejected, even if nobody took over."""
    sid = await new_session(store, [event()])
    fence = await claimed(store, lease=SHORT_LEASE)
    await anyio.sleep(PAST_SHORT_LEASE)
    await raises(LeaseLost, store.append(sid, [event()], fence=fence))
    assert await store.last_seq(sid) == 1


async def check_claim_skips_leased(store: Store) -> None:
    """Two brains never hold one session: a leased session is not handed out again."""
    first = await new_session(store, [event()])
    second = await new_session(store, [event()])
    a = await claimed(store, "w1")
    b = await claimed(store, "w2")
    assert {a.session_id, b.session_id} == {first, second}
    assert await store.claim("w3", LONG_LEASE) is None
    await store.wake(first)  # new work on a leased session waits for the lease
    assert await store.claim("w3", LONG_LEASE) is None
    status = await store.queue_status()
    assert (status.leased, status.expired) == (2, 0)


async def check_expired_lease_reclaimable(store: Store) -> None:
    """A dead brain's session is claimable again once its lease expires, with a new token."""
    sid = await new_session(store, [event()])
    old = await claimed(store, "w1", SHORT_LEASE)
    await anyio.sleep(PAST_SHORT_LEASE)
    assert (await store.queue_status()).expired == 1
    new = await claimed(store, "w2")
    assert (new.session_id, new.token) == (sid, old.token + 1)
    assert (old.takeover, new.takeover) == (False, True)  # only w2 took it from another
    await raises(LeaseLost, store.append(sid, [event()], fence=old))
    assert seqs(await store.append(sid, [event()], fence=new)) == [2]


async def check_release_keeps_pending_work(store: Store) -> None:
    """Work arriving during a lease is claimable after release; without it, nothing is."""
    sid = await new_session(store, [event()])
    fence = await claimed(store)
    await store.append(sid, [event()], wake=True)
    assert await store.claim("w2", LONG_LEASE) is None
    await store.release(fence)
    again = await claimed(store, "w2")
    assert (again.session_id, again.token) == (sid, fence.token + 1)
    await store.release(again)
    assert await store.claim("w3", LONG_LEASE) is None
    await store.release(again)  # releasing twice is harmless


async def check_wake_in_append_is_atomic(store: Store) -> None:
    """`wake=True` commits with the append: a rejected append wakes nothing."""
    sid = await new_session(store)
    assert await store.claim("w1", LONG_LEASE) is None
    await store.append(sid, [event()], wake=True)
    fence = await claimed(store)
    assert fence.session_id == sid
    stale = Fence(session_id=sid, owner="w0", token=fence.token)
    await raises(LeaseLost, store.append(sid, [event()], fence=stale, wake=True))
    duplicate = event()
    await raises(Exception, store.append(sid, [event(), duplicate, duplicate], wake=True))
    assert await store.last_seq(sid) == 1
    await store.release(fence)
    assert await store.claim("w2", LONG_LEASE) is None
    assert (await store.queue_status()).pending == 0


async def check_heartbeat(store: Store) -> None:
    """Heartbeats extend a live lease and fail once it expired or was taken over."""
    await new_session(store, [event()])
    fence = await claimed(store, "w1", SHORT_LEASE)
    assert await store.heartbeat(fence, LONG_LEASE) is True
    await anyio.sleep(PAST_SHORT_LEASE)
    assert await store.claim("w2", LONG_LEASE) is None  # the heartbeat kept it
    assert await store.heartbeat(fence, SHORT_LEASE) is True
    await anyio.sleep(PAST_SHORT_LEASE)
    assert await store.heartbeat(fence, LONG_LEASE) is False  # expired, even if not taken
    taker = await claimed(store, "w2")
    assert taker.token == fence.token + 1
    assert await store.heartbeat(fence, LONG_LEASE) is False
    assert await store.heartbeat(taker, LONG_LEASE) is True
    await store.release(taker)
    assert await store.heartbeat(taker, LONG_LEASE) is False


async def check_wake_and_wait(store: Store) -> None:
    """Delayed wakes are not due yet; an earlier wake wins; waiters return on a wake."""
    sid = await new_session(store)
    await store.wake(sid, delay=LONG_LEASE)
    assert await store.claim("w1", LONG_LEASE) is None
    assert (await store.queue_status()).pending == 1
    await store.wake(sid)
    fence = await claimed(store)
    assert fence.session_id == sid
    await store.release(fence)
    done = anyio.Event()

    async def waiter() -> None:
        await store.wait_for_work(LONG_LEASE * 10)
        done.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            while not done.is_set():  # the waiter may not be waiting yet: wake until it hears
                await store.wake(sid)
                with anyio.move_on_after(0.1):
                    await done.wait()
    await store.wait_for_work(0.01)  # a timeout is a plain return


async def check_queue_status(store: Store) -> None:
    """Pending, leased and expired counts."""
    status = await store.queue_status()
    assert (status.pending, status.leased, status.expired) == (0, 0, 0)
    await new_session(store, [event()])
    await new_session(store, [event()])
    assert (await store.queue_status()).pending == 2
    await claimed(store, "w1", SHORT_LEASE)
    await claimed(store, "w2", LONG_LEASE)
    await anyio.sleep(PAST_SHORT_LEASE)
    status = await store.queue_status()
    assert (status.pending, status.leased, status.expired) == (0, 1, 1)
    assert dict(status.sessions) == {"idle": 2}  # sessions by status, for /metrics


LOG_AND_QUEUE_CHECKS: list[Check] = [
    check_append_numbers_events,
    check_positional_reads,
    check_long_ascending_reads,
    check_internal_events_hidden,
    check_created_filters,
    check_unknown_session,
    check_concurrent_appends,
    check_projection,
    check_subscribe_after_commit,
    check_previews,
    check_delete_session,
    check_child_threads,
    check_stale_fence_rejected,
    check_expired_lease_rejected,
    check_claim_skips_leased,
    check_expired_lease_reclaimable,
    check_release_keeps_pending_work,
    check_wake_in_append_is_atomic,
    check_heartbeat,
    check_wake_and_wait,
    check_queue_status,
]

ALL_CHECKS: list[Check] = LOG_AND_QUEUE_CHECKS + CALL_CHECKS + RESOURCE_CHECKS + MEMORY_CHECKS
