"""An unreachable PostgreSQL, or one without the database, is one line naming host, port,
database and the fix, within seconds, for every command that opens the store (issue 18)."""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from tests.server import DATABASE_URL_ENV, free_port
from tests.startup.support import assert_one_line_error, corral

COMMANDS = [("status",), ("migrate",), ("serve",), ("worker",)]


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released without listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _args(command: tuple[str, ...]) -> tuple[str, ...]:
    if command[0] == "serve":
        return ("serve", "--port", str(free_port()))
    return command


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_unreachable_server(tmp_path: Path, command: tuple[str, ...]) -> None:
    port = _closed_port()
    url = f"postgresql://corral@127.0.0.1:{port}/corral"
    done = corral(tmp_path, *_args(command), "--database-url", url, timeout=60)
    assert done.code == 1
    line = assert_one_line_error(done, f"127.0.0.1:{port}", "'corral'", "CORRAL_DATABASE_URL")
    assert "Connection refused" in line
    assert len(done.lines) == 1, done.stderr  # nothing logged, written or generated first
    assert done.seconds < 20  # today: 30 s of pool retries first


@pytest.fixture
def base_url() -> str:
    url = os.environ.get(DATABASE_URL_ENV)
    if not url:
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    return url


def _drop(base: str, name: str) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))


@pytest.mark.postgres
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_missing_database(tmp_path: Path, base_url: str, command: tuple[str, ...]) -> None:
    name = f"corral_missing_{secrets.token_hex(4)}"
    parts = urlsplit(base_url)
    url = urlunsplit(parts._replace(path=f"/{name}"))
    done = corral(tmp_path, *_args(command), "--database-url", url, timeout=60)
    assert done.code == 1
    assert_one_line_error(
        done,
        f"{parts.hostname}:{parts.port or 5432}",
        f"'{name}'",
        f"`createdb {name}`",
        "`corral migrate --create-database`",
    )
    assert len(done.lines) == 1, done.stderr
    assert done.seconds < 20


@pytest.mark.postgres
def test_migrate_create_database(tmp_path: Path, base_url: str) -> None:
    name = f"corral_created_{secrets.token_hex(4)}"
    url = urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))
    try:
        done = corral(tmp_path, "migrate", "--create-database", "--database-url", url)
        assert done.code == 0, done.stderr
        assert f"created database {name}" in done.stderr
        again = corral(tmp_path, "migrate", "--create-database", "--database-url", url)
        assert again.code == 0 and f"database {name} exists" in again.stderr, again.stderr
        status = corral(tmp_path, "status", "--database-url", url)
        assert status.code == 0 and "pending=0" in status.stderr, status.stderr
    finally:
        _drop(base_url, name)
    assert list(tmp_path.iterdir()) == []  # PostgreSQL needs no data dir


def test_worker_metrics_port_taken(tmp_path: Path) -> None:
    url = f"postgresql://corral@127.0.0.1:{_closed_port()}/corral"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = corral(tmp_path, "worker", "--database-url", url, "--metrics-port", str(port))
    assert done.code == 1
    assert_one_line_error(done, f"127.0.0.1:{port}", "in use", "--metrics-port")
    assert len(done.lines) == 1, done.stderr


@pytest.mark.postgres
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_database_not_in_utf8_is_refused(
    tmp_path: Path, base_url: str, command: tuple[str, ...]
) -> None:
    """SQL_ASCII (what `initdb` under the C locale makes) answered 500s on the first non-ASCII
    character; it is refused at start, before anything is written."""
    name = f"corral_ascii_{secrets.token_hex(4)}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        create = (
            "CREATE DATABASE {} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
        )
        conn.execute(sql.SQL(create).format(sql.Identifier(name)))
    try:
        url = urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))
        done = corral(tmp_path, *_args(command), "--database-url", url, timeout=60)
        assert done.code == 1
        assert_one_line_error(done, f"'{name}'", "SQL_ASCII", "UTF8", f"-T template0 {name}")
        assert len(done.lines) == 1, done.stderr
        with psycopg.connect(url) as conn:
            tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            assert tables.fetchone() == (0,)  # nothing migrated into it
    finally:
        _drop(base_url, name)


def test_create_database_asks_for_utf8_where_the_server_default_is_not() -> None:
    from corral.store.postgres_probe import _create_statement

    plain = _create_statement("db", "UTF8").as_string(None)
    assert plain == 'CREATE DATABASE "db"'
    forced = _create_statement("db", "SQL_ASCII").as_string(None)
    assert "TEMPLATE template0 ENCODING 'UTF8'" in forced
