"""The `corral` command: serve, worker, hands, demo, migrate, status, vault-rekey, env-key."""

from __future__ import annotations

import logging
import os
import resource
import socket
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from corral import preflight
from corral.cli_backup import refuse_newer_schema, register_backup
from corral.cli_config import config_app, load_or_exit
from corral.cli_envkeys import env_key_app
from corral.cli_hands import hands
from corral.cli_options import (
    CONTEXT,
    EPILOG,
    DatabaseUrl,
    DataDir,
    Host,
    MetricsPort,
    Port,
    Version,
    Workers,
)
from corral.config import Settings, ensure_api_keys
from corral.observability.logs import fields, setup_logging
from corral.preflight import reported
from corral.serving import (
    return_free_memory,
    serve_async,
    signal_free_server,
    traced,
    tune_gc,
)
from corral.settings.model import early_log_level
from corral.stopping import watch_signals

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=__doc__,
    context_settings=CONTEXT,
    epilog=EPILOG,
)
app.add_typer(env_key_app, name="env-key")
app.add_typer(config_app, name="config")
app.command("hands")(hands)
register_backup(app)
console = Console(stderr=True)
log = logging.getLogger("corral")


@app.callback()
def _options(version: Version = False) -> None:
    """Options before the command (`corral --version`)."""


AcceptLostVaultKey = Annotated[
    bool,
    typer.Option(
        "--accept-lost-vault-key",
        help="Start although no configured vault key opens the stored credentials (they stay "
        "unusable until re-created; docs/vaults.md).",
    ),
]


def _settings(**overrides: Any) -> Settings:
    return load_or_exit(overrides).settings


@app.command()
def serve(
    host: Host = None,
    port: Port = None,
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    workers: Workers = None,
    accept_lost_vault_key: AcceptLostVaultKey = False,
) -> None:
    """Serve the Managed Agents API (embedded SQLite by default). API keys: CORRAL_API_KEYS
    (default: one generated into the data directory); every setting: docs/configuration.md."""
    settings = _settings(
        host=host, port=port, data_dir=data_dir, database_url=database_url, workers=workers
    )
    with reported():  # the port first: nothing is written or announced if it is taken
        preflight.refuse_api_only_sqlite(settings)
        preflight.check_sandbox_uids(settings)
        sock = preflight.listen(settings.host, settings.port)
        preflight.check_database(settings)
    settings, new_key = ensure_api_keys(settings)
    if new_key:
        console.print(
            f"[bold green]Generated API key[/] (stored in {settings.data_dir}/api_key,"
            f" shown once): [bold]{new_key}[/]"
        )
    preflight.warn_missing_model_keys(settings)
    raise_fd_limit(settings)
    announce = partial(_announce, settings, int(sock.getsockname()[1]))
    with reported():
        anyio.run(
            partial(
                serve_async,
                settings,
                sock=sock,
                announce=announce,
                vault_check=not accept_lost_vault_key,
            )
        )


def _announce(settings: Settings, port: int) -> None:
    """The start line, once the server accepts requests."""
    log.info(
        "Corral listening on http://%s:%s (web console: http://%s:%s/console)",
        settings.host,
        port,
        settings.host,
        port,
        extra=fields(kind="start", store="postgresql" if _pg(settings) else "sqlite"),
    )


async def worker_async(
    settings: Settings, *, metrics: socket.socket | None = None, vault_check: bool = True
) -> None:
    """Run brains (and their local sandboxes); an HTTP server only for /metrics, on the
    `metrics` socket if given (bound before anything else, like `serve`'s port)."""
    from corral.runtime import open_runtime

    async with traced(settings), open_runtime(settings, vault_check=vault_check) as runtime:
        tune_gc()
        async with anyio.create_task_group() as tg:
            # SIGTERM: brains finish their step and hand over, then `run` returns
            tg.start_soon(watch_signals, runtime.stopping)
            tg.start_soon(return_free_memory)
            if metrics is not None:
                tg.start_soon(_serve_metrics, runtime, metrics)
            await runtime.scheduler.run()  # brains, and the tick keeping sandboxes with sessions
            tg.cancel_scope.cancel()


async def _serve_metrics(runtime: Any, sock: socket.socket) -> None:
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
    await signal_free_server(config).serve(sockets=[sock])


@app.command()
def worker(
    database_url: DatabaseUrl = None,
    data_dir: DataDir = None,
    workers: Workers = None,
    metrics_port: MetricsPort = None,
    accept_lost_vault_key: AcceptLostVaultKey = False,
) -> None:
    """Run brain workers only, against a shared PostgreSQL database."""
    settings = _settings(
        data_dir=data_dir, database_url=database_url, workers=workers, metrics_port=metrics_port
    )
    if not (settings.database_url or "").startswith(("postgres://", "postgresql://")):
        console.print(
            "[red]corral worker needs --database-url postgresql://… (the embedded "
            "SQLite store belongs to one `corral serve` process)[/]"
        )
        raise typer.Exit(2)
    metrics = None
    with reported():
        if settings.metrics_port is not None:
            where = "--metrics-port / [metrics] port"
            metrics = preflight.listen(settings.host, settings.metrics_port, where)
        preflight.check_sandbox_uids(settings)
        preflight.check_database(settings)
    if settings.metrics_port is not None:
        settings, _ = ensure_api_keys(settings)  # /metrics takes the API processes' keys
    preflight.warn_missing_model_keys(settings)
    log.info("Corral worker: %d brain slots", settings.workers, extra=fields(kind="start"))
    raise_fd_limit(settings)
    with reported():
        anyio.run(
            partial(worker_async, settings, metrics=metrics, vault_check=not accept_lost_vault_key)
        )


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


DemoDataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help=escape(
            "Keep the demo's server data and files here [default: a scratch directory, "
            "never the default data directory] [env: CORRAL_DATA_DIR; toml: [server] data_dir]"
        ),
    ),
]


@app.command()
def demo(
    model: Annotated[str, typer.Option(help="Model for the agent.")] = "corral-scripted",
    data_dir: DemoDataDir = None,
) -> None:
    """Play the incident-triage story, then its multi-agent follow-up with a memory store,
    against an embedded server."""
    from corral.demo.embedded import run_embedded_demo

    settings = _settings(data_dir=data_dir)
    # the story is the demo's output: no line per request of its own client on top of it
    logging.getLogger("corral.http").setLevel(logging.WARNING)
    raise typer.Exit(run_embedded_demo(settings, model=model))


@app.command()
def migrate(
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
    create_database: Annotated[
        bool,
        typer.Option(
            "--create-database",
            help="First create the database: on PostgreSQL the one the URL names (through "
            "the `postgres` database), on SQLite the data dir.",
        ),
    ] = False,
) -> None:
    """Create or upgrade the database schema."""
    from corral.runtime import open_store

    settings = _settings(data_dir=data_dir, database_url=database_url)

    async def run() -> None:
        if create_database:
            await _create_database(settings)
        store = open_store(settings)
        await store.open()
        await store.aclose()

    with reported():
        if not create_database:
            preflight.require_data_dir(settings)
        anyio.run(run)
    console.print("schema is up to date")


async def _create_database(settings: Settings) -> None:
    """`migrate --create-database`: the PostgreSQL database, or the SQLite data dir."""
    from corral.runtime import secure_data_dir
    from corral.store.postgres_probe import Target, create_database

    if _pg(settings):
        url = settings.database_url or ""
        created = await create_database(url)
        name = Target.of(url).dbname
        console.print(f"created database {name}" if created else f"database {name} exists")
    elif settings.database_url:
        path = preflight.sqlite_file(settings).absolute().parent
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    else:
        await anyio.to_thread.run_sync(secure_data_dir, settings.data_dir)


@app.command("vault-rekey")
def vault_rekey(data_dir: DataDir = None, database_url: DatabaseUrl = None) -> None:
    """Re-seal every credential and repository token under the first CORRAL_VAULT_KEY
    (finishes a key rotation)."""
    from corral.runtime import open_store
    from corral.service.repositories import RepositoryTokens
    from corral.vault.keys import load_keys
    from corral.vault.secrets import VaultSecrets

    settings = _settings(data_dir=data_dir, database_url=database_url)
    with reported():
        preflight.require_database(settings)
        preflight.require_vault_key(settings)  # never a new key: it would open nothing
    keyring = load_keys(settings.vault_key, settings.data_dir).keyring

    async def run() -> tuple[int, int]:
        store = open_store(settings)
        await store.open()
        try:
            credentials = await VaultSecrets(store, keyring).rekey()
            return credentials, await RepositoryTokens(store, keyring).rekey()
        finally:
            await store.aclose()

    with reported():
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

    with reported():
        preflight.require_database(settings)
        anyio.run(run)


def main() -> None:
    """Entry point of the console script."""
    setup_logging(early_log_level(os.environ))
    with refuse_newer_schema():
        app()
