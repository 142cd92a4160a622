"""SQLite's memory stays bounded while the database grows.

The writer connection keeps every page it wrote or read in its page cache, up to
`cache_size`; readers lose theirs at each commit of another connection (WAL), so only the
writer's fills. At 64 MiB a connection, a server's RSS grew with its logs for the first
64 MiB of database (about 55 MiB/h in `bench/soak.py`, docs/performance.md "Soak"). This
test grows a database well past the cap through the store's writer and readers and reads
SQLite's own count of the memory it holds (`sqlite3_memory_used`, all connections of the
process).
"""

from __future__ import annotations

import _sqlite3
import ctypes
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.store.sqlite_db import SqliteDatabase

pytestmark = pytest.mark.anyio

ROW = "x" * 3000
ROWS_PER_WRITE = 500  # ~1.5 MB a transaction
WRITES = 16  # a ~24 MB database (and WAL): beyond the bound, within the old 64 MiB cap
BOUND = 12 * 2**20
"""SQLite's memory for this database: the writer's page cache, a reader's, schema, statements."""


def sqlite_memory_used() -> int:
    """Bytes SQLite has allocated now, in this process."""
    lib = ctypes.CDLL(_sqlite3.__file__)
    used = lib.sqlite3_memory_used
    used.restype = ctypes.c_int64
    return int(used())


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    opened = SqliteDatabase(tmp_path / "corral.db")
    opened.open()
    await opened.write(lambda c: c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)"))
    try:
        yield opened
    finally:
        await opened.aclose()


def insert(conn: sqlite3.Connection) -> None:
    conn.executemany("INSERT INTO t (body) VALUES (?)", [(ROW,)] * ROWS_PER_WRITE)


def scan(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT sum(length(body)) FROM t").fetchone()[0])


async def test_sqlite_memory_is_bounded_as_the_database_grows(
    db: SqliteDatabase, tmp_path: Path
) -> None:
    before = sqlite_memory_used()
    for _ in range(WRITES):
        await db.write(insert)
    await db.read(scan)  # a reader touches every page
    await db.write(scan)  # and so does the writer: its cache is the one that keeps pages
    grown = sqlite_memory_used() - before
    size = (tmp_path / "corral.db").stat().st_size + (tmp_path / "corral.db-wal").stat().st_size
    assert size > 2 * BOUND  # the database did outgrow the bound
    assert grown < BOUND, f"SQLite holds {grown} bytes for a database of {size}"
