"""One plain connection before the pool: a missing or unreachable PostgreSQL is one line.

`psycopg_pool` retries a failing server for its whole timeout (30 s of warnings, then a
`PoolTimeout` traceback that names neither the host nor the database). A single connection
with a short timeout fails at once with libpq's reason, which `probe` turns into a
`DatabaseUnavailable` naming host, port, database and the fix. `create_database` is
`corral migrate --create-database`: it connects to the `postgres` maintenance database with the
same credentials and creates the one the URL names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from corral.errors import StartupError

CONNECT_TIMEOUT_SECONDS = 5
"""Unless the URL sets `connect_timeout`: long enough for a distant server, short enough that
a host dropping packets does not look like a hang."""
MAINTENANCE_DB = "postgres"


class DatabaseUnavailable(StartupError):
    """PostgreSQL cannot be reached, refused us, or lacks the database."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a URL points, for messages (never the password)."""

    host: str
    port: str
    dbname: str
    user: str

    @classmethod
    def of(cls, url: str) -> Target:
        """Host, port, database and user of a URL, with libpq's defaults filled in."""
        params = conninfo_to_dict(url)
        user = str(params.get("user") or "the current user")
        return cls(
            host=str(params.get("host") or "the default socket"),
            port=str(params.get("port") or "5432"),
            dbname=str(params.get("dbname") or params.get("user") or "?"),
            user=user,
        )

    @property
    def where(self) -> str:
        """`host:port` (IPv6 literals in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def _with_timeout(url: str, **overrides: str) -> str:
    """The URL as a conninfo string with a connect timeout.

    Raises:
        DatabaseUnavailable: libpq cannot parse it (its reason is not shown: it may quote the
            password).
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:
        raise DatabaseUnavailable(
            "the database URL (--database-url / CORRAL_DATABASE_URL) is not a PostgreSQL URL "
            "libpq can read: check the host, the port, the percent-encoding of user and "
            "password, and the query parameters",
            exit_code=2,
        ) from None
    extra = {} if params.get("connect_timeout") else {"connect_timeout": CONNECT_TIMEOUT_SECONDS}
    return make_conninfo(url, **extra, **overrides)


def _reason(exc: psycopg.Error) -> str:
    """libpq's reason on one line: `Connection refused`, `role "x" does not exist`..."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    reason = first.rsplit(" failed: ", 1)[-1].removeprefix("connection failed: ")
    return re.sub(r"\s+", " ", reason.removeprefix("FATAL:")).strip()


def _missing_database(target: Target) -> str:
    return (
        f"PostgreSQL at {target.where} has no database {target.dbname!r}: create it with "
        f"`createdb {target.dbname}`, or `corral migrate --create-database`"
    )


def unavailable(url: str, exc: psycopg.Error) -> DatabaseUnavailable:
    """The one-line error for a failed connection to `url`."""
    target = Target.of(url)
    reason = _reason(exc)
    if f'database "{target.dbname}" does not exist' in reason:
        return DatabaseUnavailable(_missing_database(target))
    return DatabaseUnavailable(
        f"cannot connect to PostgreSQL at {target.where} (database {target.dbname!r}, user "
        f"{target.user!r}): {reason}; check that the server runs there and the database URL "
        "(--database-url / CORRAL_DATABASE_URL)"
    )


async def probe(url: str) -> None:
    """Connect once and disconnect.

    Raises:
        DatabaseUnavailable: the server is unreachable, refused the login, or lacks the
            database; the message is one line naming host, port and database.
    """
    try:
        conn = await psycopg.AsyncConnection.connect(_with_timeout(url), autocommit=True)
    except psycopg.Error as exc:
        raise unavailable(url, exc) from None
    try:
        async with conn.cursor() as cur:
            await cur.execute("SHOW server_encoding")
            row = await cur.fetchone()
    finally:
        await conn.close()
    encoding = str(row[0]) if row else "?"
    if encoding.upper() not in ("UTF8", "UTF-8"):
        raise DatabaseUnavailable(_wrong_encoding(Target.of(url), encoding))


def _wrong_encoding(target: Target, encoding: str) -> str:
    # SQL_ASCII stores bytes unchecked and cannot convert them: every event with a non-ASCII
    # character would fail at run time, so it is refused before anything is written.
    return (
        f"PostgreSQL database {target.dbname!r} at {target.where} uses encoding {encoding}; "
        f"Corral needs UTF8: create it with `createdb -E UTF8 -T template0 {target.dbname}` "
        "(or drop it and run `corral migrate --create-database`)"
    )


async def create_database(url: str) -> bool:
    """Create the database `url` names (through the `postgres` maintenance database, same
    server and credentials); False when it already exists.

    Raises:
        DatabaseUnavailable: the server cannot be reached or refused the login or the
            `CREATE DATABASE` (the message names the privilege it needs).
    """
    maintenance = _with_timeout(url, dbname=MAINTENANCE_DB)
    target = Target.of(url)
    try:
        conn = await psycopg.AsyncConnection.connect(maintenance, autocommit=True)
    except psycopg.Error as exc:
        raise unavailable(maintenance, exc) from None
    try:
        async with conn.cursor() as cur:
            await cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (target.dbname,))
            if await cur.fetchone() is not None:
                return False
            await cur.execute(_create_statement(target.dbname, await _default_encoding(cur)))
    except psycopg.errors.DuplicateDatabase:
        return False  # made by someone else meanwhile
    except psycopg.Error as exc:
        raise DatabaseUnavailable(
            f"cannot create database {target.dbname!r} on PostgreSQL at {target.where} as "
            f"{target.user!r}: {_reason(exc)} (the role needs CREATEDB)"
        ) from None
    finally:
        await conn.close()
    return True


async def _default_encoding(cur: psycopg.AsyncCursor[tuple[object, ...]]) -> str:
    """The encoding a plain `CREATE DATABASE` gives (template1's)."""
    await cur.execute(
        "SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = 'template1'"
    )
    row = await cur.fetchone()
    return str(row[0]) if row else "UTF8"


def _create_statement(dbname: str, default_encoding: str) -> sql.Composed:
    """CREATE DATABASE, in UTF8 even where the server's default is not (a cluster made with
    `initdb` under the C locale defaults to SQL_ASCII): then from template0, with the C
    locale, which every encoding accepts."""
    name = sql.Identifier(dbname)
    if default_encoding.upper() == "UTF8":
        return sql.SQL("CREATE DATABASE {}").format(name)
    return sql.SQL(
        "CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C'"
    ).format(name)
