"""The `corral` command: serve, worker, hands, demo, migrate, status, vault-rekey."""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from corral.cli_backup import refuse_newer_schema, register_backup
from corral.cli_envkeys import env_key_app
from corral.cli_hands import hands
from corral.config import Settings, ensure_api_keys, load_settings
from corral.observability.logs import fields, setup_logging
from corral.serving import serve_async, traced, tune_gc

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
app.add_typer(env_key_app, name="env-key")
app.command("hands")(hands)
register_backup(app)
console = Console(stderr=True)
log = logging.getLogger("corral")

DataDir = Annotated[Path | None, typer.Option("--data-dir", help="Data directory.")]
DatabaseUrl = Annotated[
    str | None, typer.Option("--database-url", help="postgresql://… or sqlite:///path")
]


def _settings(**overrides: Any) -> Settings:
    try:
        return load_settings(overrides)
    except ValueError as exc:
        # escaped: messages name settings like `[web_search] url`, which rich reads as markup
        console.print(f"[red]configuration error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from exc


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to bind.")] = None,
    port: Annotated[int | None, typer.Option(help="Port to bind.")] = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    workers: Annotated[int | None, typer.Option(help="Brain slots in this process.")] = None,
) -> None:
    """Serve the Managed Agents API (embedded SQLite by default)."""
    settings = _settings(
        host=host, port=port, data_dir=data_dir, database_url=database_url, workers=workers
    )
    settings, new_key = ensure_api_keys(settings)
    if new_key:
        console.print(
            f"[bold green]Generated API key[/] (stored in {settings.data_dir}/api_key,"
            f" shown once): [bold]{new_key}[/]"
        )
    log.info(
        "Corral listening on http://%s:%s (web console: http://%s:%s/console)",
        settings.host,
        settings.port,
        settings.host,
        settings.port,
        extra=fields(kind="start", store="postgresql" if _pg(settings) else "sqlite"),
    )
    raise_fd_limit(settings)
    anyio.run(serve_async, settings)


async def worker_async(settings: Settings) -> None:
    """Run brains (and their local sandboxes); an HTTP server only for /metrics, if asked."""
    from corral.runtime import open_runtime

    async with traced(settings), open_runtime(settings) as runtime:
        tune_gc()
        async with anyio.create_task_group() as tg:
            if settings.metrics_port is not None:
                tg.start_soon(_serve_metrics, runtime)
            await runtime.scheduler.run()  # brains, and the tick keeping sandboxes with sessions
            tg.cancel_scope.cancel()


async def _serve_metrics(runtime: Any) -> None:
    import uvicorn

    from corral.api.app import create_metrics_asgi

    settings = runtime.settings
    config = uvicorn.Config(
        create_metrics_asgi(runtime),
        host=settings.host,
        port=settings.metrics_port,
        log_level="warning",
        log_config=None,
        lifespan="off",
    )
    await uvicorn.Server(config).serve()


@app.command()
def worker(
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    workers: Annotated[int | None, typer.Option(help="Brain slots in this process.")] = None,
    metrics_port: Annotated[
        int | None, typer.Option(help="Serve GET /metrics on this port (host: [server] host).")
    ] = None,
) -> None:
    """Run brain workers only, against a shared PostgreSQL database."""
    settings = _settings(
        data_dir=data_dir, database_url=database_url, workers=workers, metrics_port=metrics_port
    )
    if settings.metrics_port is not None:
        settings, _ = ensure_api_keys(settings)  # /metrics takes the API processes' keys
    if not (settings.database_url or "").startswith(("postgres://", "postgresql://")):
        console.print(
            "[red]corral worker needs --database-url postgresql://… (the embedded "
            "SQLite store belongs to one `corral serve` process)[/]"
        )
        raise typer.Exit(2)
    log.info("Corral worker: %d brain slots", settings.workers, extra=fields(kind="start"))
    raise_fd_limit(settings)
    anyio.run(worker_async, settings)


def _pg(settings: Settings) -> bool:
    return (settings.database_url or "").startswith(("postgres://", "postgresql://"))


def raise_fd_limit(settings: Settings) -> int:
    """Raise the soft open-file limit to the hard one and return it.

    Each sandbox's egress proxy may hold 2 * egress_max_connections + 2 descriptors (see
    `hands/_egress.py`); with the usual soft limit of 1024 a handful of busy sandboxes would
    starve the API and the database of descriptors, with the hard limit (commonly 524288 or
    more) hundreds of saturated sandboxes fit. Warns when even that leaves little room.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit above %d: %s", soft, exc)
    per_sandbox = 2 * settings.egress_max_connections + 16  # proxy + the sandbox's own pipes
    if soft // per_sandbox < 100:
        log.warning(
            "open-file limit %d: room for about %d sandboxes with saturated egress proxies; "
            "raise the hard limit (LimitNOFILE=) for more",
            soft,
            soft // per_sandbox,
        )
    return soft


@app.command()
def demo(
    model: Annotated[str, typer.Option(help="Model for the agent.")] = "corral-scripted",
    data_dir: DataDir = None,
) -> None:
    """Play the incident-triage story, then its multi-agent follow-up with a memory store,
    against an embedded server."""
    from corral.demo.embedded import run_embedded_demo

    settings = _settings(data_dir=data_dir)
    # the story is the demo's output: no line per request of its own client on top of it
    logging.getLogger("corral.http").setLevel(logging.WARNING)
    raise typer.Exit(run_embedded_demo(settings, model=model))


@app.command()
def migrate(data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Create or upgrade the database schema."""
    from corral.runtime import open_store

    settings = _settings(data_dir=data_dir, database_url=database_url)

    async def run() -> None:
        store = open_store(settings)
        await store.open()
        await store.aclose()

    anyio.run(run)
    console.print("schema is up to date")


@app.command("vault-rekey")
def vault_rekey(data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Re-seal every credential and repository token under the first CORRAL_VAULT_KEY
    (finishes a key rotation)."""
    from corral.runtime import open_store
    from corral.service.repositories import RepositoryTokens
    from corral.vault.keys import load_keys
    from corral.vault.secrets import VaultSecrets

    settings = _settings(data_dir=data_dir, database_url=database_url)
    keyring = load_keys(settings.vault_key, settings.data_dir).keyring

    async def run() -> tuple[int, int]:
        store = open_store(settings)
        await store.open()
        try:
            credentials = await VaultSecrets(store, keyring).rekey()
            return credentials, await RepositoryTokens(store, keyring).rekey()
        finally:
            await store.aclose()

    count, tokens = anyio.run(run)
    console.print(
        f"re-sealed {count} credential(s) and {tokens} repository token(s) "
        f"under vault key {keyring.primary_id}"
    )


@app.command()
def status(data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Queue depth and leases."""
    from corral.runtime import open_store

    settings = _settings(data_dir=data_dir, database_url=database_url)

    async def run() -> None:
        store = open_store(settings)
        await store.open()
        try:
            queue = await store.queue_status()
            console.print(f"pending={queue.pending} leased={queue.leased} expired={queue.expired}")
        finally:
            await store.aclose()

    anyio.run(run)


def main() -> None:
    """Entry point of the console script."""
    setup_logging(os.environ.get("CORRAL_LOG_LEVEL", "INFO"))
    with refuse_newer_schema():
        app()
