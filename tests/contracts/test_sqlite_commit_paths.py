"""The SQLite database commits a tick's writes on the event loop when the writer thread is idle
and on the writer thread otherwise; whichever path a batch takes, writes commit in the order
they were submitted, a failing write undoes only itself, and checkpoints happen beside the
commits.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from corral.store import sqlite_db
from corral.store.sqlite_db import SqliteDatabase

pytestmark = pytest.mark.anyio


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    opened = SqliteDatabase(tmp_path / "paths.db")
    opened.open()
    await opened.write(lambda c: c.execute("CREATE TABLE t (n INTEGER NOT NULL UNIQUE)"))
    try:
        yield opened
    finally:
        await opened.aclose()


def insert(n: int) -> Callable[[sqlite3.Connection], int]:
    def run(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO t (n) VALUES (?)", (n,))
        return n

    return run


def rows(db: SqliteDatabase) -> list[int]:
    return db.read_now(lambda c: [r[0] for r in c.execute("SELECT n FROM t ORDER BY rowid")])


@pytest.fixture
def fast_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every commit counts as fast, whatever this machine's fsync takes right now."""
    monkeypatch.setattr(sqlite_db, "_INLINE_MAX_SECONDS", 1e9)


@pytest.mark.usefixtures("fast_disk")
async def test_sequential_writes_on_an_idle_writer_commit_on_the_loop(db: SqliteDatabase) -> None:
    before, inline_before = db.commits, db.inline_commits
    for n in range(20):
        assert await db.write(insert(n)) == n
    assert db.commits - before == 20
    assert db.inline_commits - inline_before == 20
    assert rows(db) == list(range(20))


async def test_a_slow_disk_keeps_commits_off_the_loop(
    db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_db, "_INLINE_MAX_SECONDS", 0.0)
    inline_before = db.inline_commits
    assert await asyncio.gather(*(db.write(insert(n)) for n in range(3))) == [0, 1, 2]
    assert await db.write(insert(3)) == 3
    assert db.inline_commits == inline_before
    assert rows(db) == [0, 1, 2, 3]


async def test_writes_wait_behind_a_busy_writer_thread_and_keep_their_order(
    db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(conn: sqlite3.Connection) -> int:
        started.set()
        release.wait(10)
        conn.execute("INSERT INTO t (n) VALUES (-1)")
        return -1

    # A slow disk sends the first batch to the writer thread...
    monkeypatch.setattr(sqlite_db, "_INLINE_MAX_SECONDS", 0.0)
    first = db.write(slow)
    await asyncio.sleep(0)
    assert await asyncio.to_thread(started.wait, 10)
    # ...and a fast one would take the next ones inline, but the writer still owes a batch.
    monkeypatch.setattr(sqlite_db, "_INLINE_MAX_SECONDS", 1e9)
    inline_before = db.inline_commits
    later = [db.write(insert(n)) for n in range(5)]
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in later)
    release.set()
    assert await first == -1
    assert await asyncio.gather(*later) == list(range(5))
    assert db.inline_commits == inline_before
    assert rows(db) == [-1, 0, 1, 2, 3, 4]
    # Once the writer has caught up, the loop commits again.
    assert await db.write(insert(5)) == 5
    assert db.inline_commits == inline_before + 1


@pytest.mark.usefixtures("fast_disk")
async def test_a_failing_write_in_an_inline_batch_undoes_only_itself(db: SqliteDatabase) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t (n) VALUES (100)")
        conn.execute("INSERT INTO t (n) VALUES (1)")  # a duplicate of the first write below

    outcomes = await asyncio.gather(
        db.write(insert(1)), db.write(half_then_fail), db.write(insert(2)), return_exceptions=True
    )
    assert outcomes[0] == 1 and outcomes[2] == 2
    assert isinstance(outcomes[1], sqlite3.IntegrityError)
    assert rows(db) == [1, 2]
    assert db.inline_commits >= 1


@pytest.mark.usefixtures("fast_disk")
async def test_checkpoints_keep_the_wal_from_growing_without_bound(
    db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every commit on the loop, where SQLite's own checkpoint is switched off: the writer
    # thread's must still run.
    monkeypatch.setattr(sqlite_db, "_CHECKPOINT_EVERY", 10)
    wal = db.path.with_name(db.path.name + "-wal")
    blob = "x" * 200_000  # ~50 pages per commit: 1,000 pages of WAL every 20 commits
    await db.write(lambda c: c.execute("CREATE TABLE big (b TEXT)"))
    for _ in range(200):
        await db.write(lambda c: c.execute("INSERT INTO big VALUES (?)", (blob,)))
        await db.write(lambda c: c.execute("DELETE FROM big"))
    # Without checkpoints the WAL would hold every commit: 200 x 2 x 200 kB = 80 MB.
    assert wal.stat().st_size < 20_000_000


@pytest.mark.usefixtures("fast_disk")
async def test_a_lone_writer_commits_at_once_and_a_burst_still_shares_commits(
    db: SqliteDatabase,
) -> None:
    await db.write(insert(0))  # a lone write: the next tick's first commits within the call
    await asyncio.sleep(0)
    done = db.write(insert(1))
    assert done.done() and done.result() == 1
    await asyncio.sleep(0)
    before = db.commits
    burst = [db.write(insert(n)) for n in range(2, 52)]
    assert await asyncio.gather(*burst) == list(range(2, 52))
    # The burst's first write went at once (the last batch was lone); the 49 others shared
    # one commit after the tick.
    assert db.commits - before == 2
    before = db.commits
    assert await asyncio.gather(*(db.write(insert(n)) for n in range(52, 62))) == list(
        range(52, 62)
    )
    assert db.commits - before == 1  # after a shared batch, even the first write waits
    assert rows(db) == list(range(62))


async def test_commits_return_to_the_loop_when_the_disk_is_fast_again(
    db: SqliteDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A moment's slow commit sends commits to the writer thread; there a commit also waits
    for the GIL the busy event loop holds, which must not read as a slow disk for ever
    (here the thread's commits take 30 ms more than the loop's: they must come back).
    The bar is raised to 20 ms so that this machine's own fsync counts as fast."""
    monkeypatch.setattr(sqlite_db, "_INLINE_MAX_SECONDS", 0.02)

    def on_thread_slowly(n: int) -> Callable[[sqlite3.Connection], int]:
        def run(conn: sqlite3.Connection) -> int:
            if threading.current_thread().name == "corral-sqlite-writer":
                threading.Event().wait(0.03)
            conn.execute("INSERT INTO t (n) VALUES (?)", (n,))
            return n

        return run

    def slow_once(conn: sqlite3.Connection) -> int:
        threading.Event().wait(0.2)  # a moment's slow disk, on the loop
        conn.execute("INSERT INTO t (n) VALUES (-1)")
        return -1

    assert await db.write(slow_once) == -1
    inline_before = db.inline_commits
    for n in range(100):
        assert await db.write(on_thread_slowly(n)) == n
    assert db.inline_commits - inline_before >= 50
    assert rows(db)[-1] == 99
