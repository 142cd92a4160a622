"""`corral env-key create|list|revoke`: the operator's environment keys (docs/self_hosted.md).

Keys are shown once, at creation, and stored as SHA-256 hashes. Safe to run beside a live
`corral serve`: the embedded store is opened without expiring the server's brain leases.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import typer
from rich.console import Console

from corral.cli_config import load_or_exit
from corral.cli_options import DatabaseUrl, DataDir
from corral.config import Settings
from corral.errors import ApiError
from corral.ids import now_rfc3339
from corral.preflight import reported, require_database, sqlite_file

T = TypeVar("T")
env_key_app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console(stderr=True)


@asynccontextmanager
async def _work_service(settings: Settings) -> AsyncIterator[Any]:
    # The stores directly, not `runtime.open_store`: the runtime imports every adapter.
    from corral.service.work import WorkService
    from corral.store.work import work_items_for

    url = settings.database_url or ""
    store: Any
    if url.startswith(("postgres://", "postgresql://")):
        from corral.store.postgres import PostgresStore

        store = PostgresStore(url, pool_size=1)
        await store.open()
    else:
        from corral.store.sqlite import SqliteStore

        store = SqliteStore(sqlite_file(settings))
        # Migrate only: `SqliteStore.open` would expire a running server's brain leases.
        await anyio.to_thread.run_sync(store.db.open)
    try:
        yield WorkService(store, work_items_for(store), ttl_seconds=settings.work_ttl_seconds)
    finally:
        await store.aclose()


def _run(data_dir: Path | None, url: str | None, body: Callable[[Any], Awaitable[T]]) -> T:
    settings = load_or_exit({"data_dir": data_dir, "database_url": url}).settings

    async def run() -> T:
        async with _work_service(settings) as service:
            return await body(service)

    try:
        with reported():
            require_database(settings)  # keys for a server's store, never a new empty one
            return anyio.run(run)
    except ApiError as exc:
        console.print(f"[red]{exc.message}[/]")
        raise typer.Exit(1) from exc


@env_key_app.command("create")
def create(environment_id: str, data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Create a key for a self_hosted environment; prints the key once (stdout) and its id."""

    async def body(service: Any) -> tuple[str, str]:
        record, key = await service.create_key(environment_id)
        return record.id, key

    key_id, key = _run(data_dir, database_url, body)
    console.print(f"environment key [bold]{key_id}[/] for {environment_id} (shown once):")
    typer.echo(key)


@env_key_app.command("list")
def list_keys(
    environment_id: str, data_dir: DataDir = None, database_url: DatabaseUrl = None
) -> None:
    """Key ids of an environment (never the keys)."""

    async def body(service: Any) -> list[Any]:
        return list(await service.work.list_environment_keys(environment_id))

    for key in _run(data_dir, database_url, body):
        state = f"revoked {key.revoked_at}" if key.revoked_at else "active"
        typer.echo(f"{key.id}\t{key.created_at}\t{state}")


@env_key_app.command("revoke")
def revoke(key_id: str, data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Revoke a key: every request made with it is refused from now on."""

    async def body(service: Any) -> bool:
        return bool(await service.work.revoke_environment_key(key_id, now_rfc3339()))

    if not _run(data_dir, database_url, body):
        console.print(f"[red]no active environment key {key_id}[/]")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")
