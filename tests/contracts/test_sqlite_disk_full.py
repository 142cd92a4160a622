"""SQLite's "database or disk is full" is a `DiskFull` (507) naming the data dir, logged once
per condition, and the store writes on correctly when space returns.

The database's own size cap (`PRAGMA max_page_count`) raises the very SQLITE_FULL a full
disk does, so this runs anywhere; `tests/chaos/test_disk_full.py` fills a real disk.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.errors import DiskFull
from corral.session.log import EventQuery
from corral.store.conformance_support import event, new_session, seqs
from corral.store.sqlite import SqliteStore

pytestmark = pytest.mark.anyio
BIG = "x" * 20_000
"""An event body spanning several pages, so each append needs new ones."""


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(Path("data") / "corral.db")  # relative, as a user's data dir may be
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


async def cap_pages(store: SqliteStore, pages: int | None) -> None:
    """Cap the database at `pages` (None: its current size), as a full disk would."""

    def run(conn: sqlite3.Connection) -> None:
        cap = pages if pages is not None else conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {int(cap)}")

    await store.db.write(run)


async def test_a_full_database_is_disk_full_once_then_writes_resume(
    store: SqliteStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral.store")
    sid = await new_session(store)
    await store.append(sid, [event(text=BIG)])
    await cap_pages(store, None)

    for _ in range(3):
        with pytest.raises(DiskFull) as full:
            await store.append(sid, [event(text=BIG)])
    assert full.value.status == 507
    assert full.value.should_retry is False
    assert f"the server's disk is full (data dir {tmp_path / 'data'})" in full.value.message
    body = full.value.body("req_1")["error"]
    assert body["type"] == "api_error" and body["details"] == {"error_code": "disk_full"}

    await cap_pages(store, 1 << 30)
    stored = await store.append(sid, [event(text=BIG)])
    await store.append(sid, [event(text=BIG)])

    assert seqs(stored) == [2]  # the refused appends left no trace, not even a seq
    assert seqs(await store.read(sid, EventQuery())) == [1, 2, 3]
    messages = [r.getMessage() for r in caplog.records]
    full_lines = [m for m in messages if m.startswith("disk full: cannot write ")]
    assert full_lines == [
        f"disk full: cannot write {tmp_path / 'data' / 'corral.db'}; writes refused until "
        "space returns"
    ]
    assert [m for m in messages if m.startswith("disk space back")] == [
        f"disk space back: writes resumed on {tmp_path / 'data' / 'corral.db'}"
    ]
