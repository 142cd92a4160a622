"""PostgreSQL across processes: followers, previews, wakes and fencing between store instances
and real OS processes sharing one database. Skipped unless `CORRAL_TEST_DATABASE_URL` is set.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import anyio
import psycopg
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from corral.session.log import EventQuery, NewEvents, Preview, SessionGone, Signal
from corral.store.conformance_support import event, new_session, signals_until
from corral.store.postgres import PostgresStore
from corral.store.postgres_db import NOTIFY_LIMIT

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

CHILD = Path(__file__).with_name("_fence_child.py")
TRIALS = 100
CHILD_LEASE = 0.1


@pytest.fixture
async def pair(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, standing in for API process A and worker process B."""
    a, b = PostgresStore(pg_url), PostgresStore(pg_url)
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await b.aclose()
        await a.aclose()


def _upto(last_seq: int) -> Callable[[Signal], bool]:
    return lambda s: isinstance(s, NewEvents) and s.last_seq >= last_seq


async def test_follower_on_a_tails_appends_on_b(pair: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = pair
    sid = await new_session(b)
    sub = a.subscribe(sid)
    written: list[str] = []
    seen: list[str] = []
    position = 0
    try:
        for n in range(20):
            written += [e.id for e in await b.append(sid, [event() for _ in range(1 + n % 3)])]
            with anyio.fail_after(10):
                while position < len(written):  # tail the way the SSE stream does
                    signals = await sub.next(10)
                    if any(isinstance(s, NewEvents) and s.last_seq > position for s in signals):
                        for stored in await a.read(sid, EventQuery(after_seq=position)):
                            position = stored.seq
                            seen.append(stored.id)
    finally:
        sub.close()
    assert seen == written


async def test_concurrent_appends_from_two_processes(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = pair
    sid = await new_session(a)

    async def writer(store: PostgresStore) -> None:
        for _ in range(10):
            await store.append(sid, [event(), event()])

    async with anyio.create_task_group() as tg:
        for store in (a, b) * 5:
            tg.start_soon(writer, store)
    log = await b.read(sid, EventQuery())
    assert [e.seq for e in log] == list(range(1, 201))


async def test_previews_cross_processes_once_and_in_order(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = pair
    sid = await new_session(a)
    sub_a, sub_b = a.subscribe(sid), b.subscribe(sid)
    big = "é" * NOTIFY_LIMIT + "\U0001f600" * 100  # too large for one notification

    def delta(text: str) -> dict[str, object]:
        return {"type": "event_delta", "event_id": "sevt_p", "delta": {"content": {"text": text}}}

    start = {"type": "event_start", "event": {"type": "agent.message", "id": "sevt_p"}}
    sent = [start, delta("hel"), delta("lo"), delta(big), delta("end")]
    try:
        for body in sent:
            await a.publish_preview(sid, body)
        far = await signals_until(sub_b, lambda s: isinstance(s, Preview) and s.body == sent[-1])
        got = [s.body for s in far if isinstance(s, Preview)]
        assert got[0] == start
        texts = [str(body["delta"]["content"]["text"]) for body in got[1:]]
        assert "".join(texts) == "hello" + big + "end"
        marker = delta("from b")
        await b.publish_preview(sid, marker)
        near = await signals_until(sub_a, lambda s: isinstance(s, Preview) and s.body == marker)
        assert [s.body for s in near if isinstance(s, Preview)] == [*sent, marker]
    finally:
        sub_a.close()
        sub_b.close()


async def test_delete_on_b_closes_followers_on_a(
    pair: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = pair
    sid = await new_session(a, [event()])
    sub = a.subscribe(sid)
    try:
        assert await b.delete_session(sid)
        await signals_until(sub, lambda s: isinstance(s, SessionGone))
    finally:
        sub.close()


async def test_wake_on_b_wakes_worker_on_a(pair: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = pair
    sid = await new_session(b)
    done = anyio.Event()

    async def worker() -> None:
        await a.wait_for_work(600)
        done.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker)
            while not done.is_set():
                await b.wake(sid)
                with anyio.move_on_after(0.2):
                    await done.wait()
    fence = await a.claim("a", 60)
    assert fence is not None and fence.session_id == sid


async def test_lost_notifications_are_resynced(pair: tuple[PostgresStore, PostgresStore]) -> None:
    a, b = pair
    sid = await new_session(b)
    sub = a.subscribe(sid)
    try:
        await a.listener.stop()  # A hears nothing while B appends
        await b.append(sid, [event(), event()])
        await anyio.sleep(0.2)
        assert not any(isinstance(s, NewEvents) for s in await sub.next(0))
        await a.listener.start()
        await signals_until(sub, _upto(2))
    finally:
        sub.close()


async def test_listener_reconnects_after_connection_loss(
    pair: tuple[PostgresStore, PostgresStore], pg_url: str
) -> None:
    a, b = pair
    sid = await new_session(b)
    sub = a.subscribe(sid)
    try:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (a.listener.backend_pid,))
        await b.append(sid, [event()])
        await signals_until(sub, _upto(1), timeout=20)
        with anyio.fail_after(20):
            while a.listener.reconnects < 1:
                await anyio.sleep(0.05)
        await b.append(sid, [event()])
        await signals_until(sub, _upto(2), timeout=20)
    finally:
        sub.close()


async def test_open_leaves_other_processes_leases(pg_url: str) -> None:
    a = PostgresStore(pg_url)
    await a.open()
    try:
        await new_session(a, [event()])
        fence = await a.claim("a", 60)
        assert fence is not None
        c = PostgresStore(pg_url)
        await c.open()  # a new process starting up must not break A's lease
        try:
            assert await c.claim("c", 60) is None
            assert await a.heartbeat(fence, 60)
        finally:
            await c.aclose()
    finally:
        await a.aclose()


async def test_concurrent_starts_migrate_once(pg_url: str) -> None:
    stores = [PostgresStore(pg_url, pool_size=2) for _ in range(6)]
    try:
        async with anyio.create_task_group() as tg:
            for store in stores:
                tg.start_soon(store.open)
        assert len({await s.schema_version() for s in stores}) == 1
        async with stores[0].pool.connection() as conn:
            cur = await conn.execute("SELECT version FROM schema_version ORDER BY version")
            versions = [v for (v,) in await cur.fetchall()]
            assert versions == list(range(1, len(versions) + 1)), "each migration applied once"
    finally:
        for store in stores:
            await store.aclose()


async def test_stopped_process_cannot_append_after_takeover(pg_url: str) -> None:
    store = PostgresStore(pg_url)
    await store.open()
    command = [sys.executable, str(CHILD), pg_url, str(CHILD_LEASE)]
    child = await anyio.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    results: list[str] = []
    sessions: list[str] = []
    try:
        assert child.stdin is not None and child.stdout is not None
        lines = BufferedByteReceiveStream(child.stdout)
        for _ in range(TRIALS):
            sessions.append(await new_session(store, [event()]))
            results.append(await _trial(store, child, lines, sessions[-1]))
        await child.stdin.aclose()
        with anyio.fail_after(30):
            assert await child.wait() == 0
    finally:
        if child.returncode is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
        with anyio.CancelScope(shield=True):
            await child.aclose()
            await store.aclose()
    assert results.count("rejected") == TRIALS, results
    for sid in sessions:
        assert await _event_count(pg_url, sid) == 1


async def _trial(
    store: PostgresStore, child: Process, lines: BufferedByteReceiveStream, sid: str
) -> str:
    """One round: the child claims and freezes, we take over, the child wakes and appends."""
    assert child.stdin is not None
    await child.stdin.send(b"go\n")
    with anyio.fail_after(30):
        claimed = (await lines.receive_until(b"\n", 4096)).decode().split()
        assert claimed[:2] == ["claimed", sid], claimed
        while not _stopped(child.pid):
            await anyio.sleep(0.005)
        while (fence := await store.claim("parent", 60)) is None:
            await anyio.sleep(0.02)
    assert (fence.session_id, fence.token) == (sid, int(claimed[2]) + 1)
    os.kill(child.pid, signal.SIGCONT)
    with anyio.fail_after(30):
        result = (await lines.receive_until(b"\n", 4096)).decode().strip()
    await store.release(fence)
    return result


def _stopped(pid: int) -> bool:
    """Whether the process is in the stopped state (`T` in /proc/PID/stat)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] == "T"


async def _event_count(url: str, sid: str) -> int:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute("SELECT count(*) FROM events WHERE session_id = %s", (sid,))
        row = await cur.fetchone()
        return int(row[0]) if row else -1
