"""Store backends for the contract tests: SQLite always, PostgreSQL when
`CORRAL_TEST_DATABASE_URL` is set (a fresh, uniquely named database per test session).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from corral.store.base import Store
from corral.store.postgres import PostgresStore
from corral.store.sqlite import SqliteStore

DATABASE_URL_ENV = "CORRAL_TEST_DATABASE_URL"


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """Conninfo of a database created for this test session and dropped after it."""
    base = os.environ.get(DATABASE_URL_ENV)
    if not base:
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    name = f"corral_test_{secrets.token_hex(6)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(base, dbname=name)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def pg_url(postgres_database: str) -> str:
    """The session's database with an empty schema (each test migrates from scratch)."""
    with psycopg.connect(postgres_database, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")
    return postgres_database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Store]:
    """Makes unopened stores of one backend, all on the same fresh database."""
    if request.param == "sqlite":
        return lambda: SqliteStore(tmp_path / "corral.db")
    url: str = request.getfixturevalue("pg_url")
    return lambda: PostgresStore(url)


@pytest.fixture
async def store(store_factory: Callable[[], Store]) -> AsyncIterator[Store]:
    """An open store on a fresh database."""
    opened = store_factory()
    await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()
