"""A reader connection lives no longer than the thread that opened it.

Worker threads come and go: anyio retires one after an idle spell and starts another for the
next burst. A connection kept past its thread is an open file on the database (and up to
64 MiB of page cache) that nobody will use again, so a server with quiet spells between bursts
leaked a few per spell. These tests run bursts separated by spells longer than the threads'
idle timeout and count the process's open files on the database: the count must not grow.

SQLite's unix VFS does not close a closed connection's file descriptor while another
connection of the process holds a lock on the file (closing would drop the process's POSIX
locks); it keeps it and reuses it for the next connection. So the count of open files is the
peak number of connections open at once, steady under a steady load, rather than a count of
open connections; `reader_count` is that.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio._backends._asyncio import WorkerThread

from corral.store.sqlite_db import SqliteDatabase

pytestmark = pytest.mark.anyio

BURST = 6
CYCLES = 5


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    opened = SqliteDatabase(tmp_path / "corral.db")
    opened.open()
    await opened.write(lambda c: c.execute("CREATE TABLE t (n INTEGER)"))
    try:
        yield opened
    finally:
        await opened.aclose()


def open_files(path: Path) -> int:
    """This process's file descriptors open on `path` (not its -wal or -shm)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except FileNotFoundError:  # the descriptor listdir itself used, closed since
            continue
    return count


def slow_count(conn: object) -> int:
    time.sleep(0.05)  # hold the thread so that a burst needs several of them
    return int(conn.execute("SELECT count(*) FROM t").fetchone()[0])  # type: ignore[attr-defined]


async def settled_readers(db: SqliteDatabase) -> int:
    """Open reader connections once the threads told to stop have exited (on their own
    time), or the last count seen if it stays above a burst's."""
    deadline = time.monotonic() + 3.0
    while db.reader_count() > BURST and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    return db.reader_count()


async def test_worker_threads_retired_between_bursts_leave_no_connection_open(
    db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # anyio's own idle timeout (10 s in production), shortened so that a quiet spell takes
    # a fraction of a second: the leak pattern is the same, only faster.
    monkeypatch.setattr(WorkerThread, "MAX_IDLE_TIME", 0.2)
    counts: list[int] = []
    for _ in range(CYCLES):
        async with anyio.create_task_group() as tg:
            for _ in range(BURST):
                tg.start_soon(db.read, slow_count)
        assert await settled_readers(db) <= BURST  # the burst's threads, no earlier ones
        counts.append(open_files(db.path))
        await anyio.sleep(0.4)  # a quiet spell: every worker thread is now past its idle time
    assert counts[0] >= BURST  # each thread of the burst read on its own connection
    # Retired threads and the next burst's may overlap for a moment, once; a leak grows by
    # about a burst every cycle.
    assert counts[-1] - counts[0] <= BURST, f"open files on the database per cycle: {counts}"


async def test_a_thread_that_exits_closes_its_reader(db: SqliteDatabase) -> None:
    """Any thread may read (`read_now` runs on the caller's); its exit closes its reader."""
    baseline = open_files(db.path)
    for _ in range(CYCLES):
        threads = [threading.Thread(target=db.read_now, args=(slow_count,)) for _ in range(BURST)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert db.reader_count() == 0
    assert open_files(db.path) <= baseline + BURST


async def test_close_closes_the_readers_of_live_threads(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "corral.db")
    db.open()
    db.read_now(lambda c: c.execute("SELECT 1").fetchone())  # this (living) thread's reader
    await db.aclose()
    assert open_files(db.path) == 0
