"""The PostgreSQL store's time bound tells a clean failure from an ambiguous one.

Through `BlackHoleProxy`, the database goes silent at a chosen point of a connection's use:
before anything, inside a transaction, during its COMMIT, during an autocommit write or
read. Past the bound the store raises `StoreUnavailable` in time, saying the outcome is
unknown exactly when a commit was in flight, and nothing of a clean failure is applied
once the database answers again.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from corral.errors import StoreUnavailable
from corral.store.postgres import PostgresStore
from tests.blackhole import BlackHoleProxy

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

BOUND = 1.0
INSERT = "INSERT INTO resources (id, kind, created_at, body) VALUES (%s, 'agent', 'now', '{}')"


@pytest.fixture
def proxy(pg_url: str) -> Iterator[BlackHoleProxy]:
    given = conninfo_to_dict(pg_url)
    upstream = (str(given.get("host") or "127.0.0.1"), int(given.get("port") or 5432))
    with BlackHoleProxy(upstream) as found:
        yield found


@pytest.fixture
async def store(pg_url: str, proxy: BlackHoleProxy) -> AsyncIterator[PostgresStore]:
    url = make_conninfo(pg_url, host="127.0.0.1", port=proxy.port)
    opened = PostgresStore(url, store_timeout=BOUND)
    await opened.open()
    try:
        yield opened
    finally:
        proxy.heal()
        await opened.aclose()


def _applied(pg_url: str, resource_id: str) -> bool:
    with psycopg.connect(pg_url) as conn:
        return (
            conn.execute("SELECT 1 FROM resources WHERE id = %s", (resource_id,)).fetchone()
            is not None
        )


async def _fails(store: PostgresStore, proxy: BlackHoleProxy, where: str) -> StoreUnavailable:
    """Black-hole the proxy at `where` in one use of a connection; return the error."""
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as caught:
        async with store.pool.connection() as conn:
            if where == "before":
                proxy.black_hole()
                await conn.execute("SELECT 1")
            elif where == "autocommit read":
                proxy.black_hole()
                await conn.execute("SELECT id, updated_at FROM sessions")
            elif where == "autocommit write":
                proxy.black_hole()
                await conn.execute(INSERT, (where,))
            else:
                async with conn.transaction():
                    await conn.execute(INSERT, (where,))
                    proxy.black_hole()
                    if where == "in transaction":
                        await conn.execute("SELECT 1")
    assert time.monotonic() - started < BOUND + 0.5
    proxy.heal()
    return caught.value


@pytest.mark.parametrize(
    ("where", "unknown"),
    [
        ("before", False),
        ("autocommit read", False),
        ("in transaction", False),
        ("commit", True),
        ("autocommit write", True),
    ],
)
async def test_the_bound_says_whether_a_commit_was_in_flight(
    store: PostgresStore, proxy: BlackHoleProxy, pg_url: str, where: str, unknown: bool
) -> None:
    error = await _fails(store, proxy, where)
    assert error.outcome_unknown is unknown, error.message
    assert error.should_retry is not unknown
    if not unknown:
        await anyio.sleep(2 * BOUND)  # let anything held in the network land: it must not commit
        assert not _applied(pg_url, where)
    await store.ping(5.0)  # and the store answers again


async def test_the_server_gives_up_too(store: PostgresStore) -> None:
    """A live but stuck server cancels the statement itself, and ends a transaction whose
    client vanished (releasing its locks) instead of holding it until TCP notices."""
    async with store.pool.connection(5 * BOUND) as conn:  # the server's bound fires first
        rows = [
            await (await conn.execute(f"SHOW {name}")).fetchone()
            for name in ("statement_timeout", "idle_in_transaction_session_timeout")
        ]
        with pytest.raises(psycopg.errors.QueryCanceled):
            await conn.execute("SELECT pg_sleep(3)")
    assert rows == [("1s",), ("2s",)]
