"""What a command checks before it claims to run, so a start either works or says in one line
why not (see docs/startup.md).

- `listen`: `corral serve` binds its port before anything else and before it announces it;
- `refuse_api_only_sqlite`: `--workers 0` needs brains elsewhere, which SQLite cannot have;
- `require_database` / `require_data_dir` / `require_vault_key`: admin commands read an
  existing data dir, never make an empty one where they happen to run;
- `check_vault_key`: the configured vault keys open the newest sealed credential;
- `check_sandbox_uids`: the sandboxes' uids exist in the server's user namespace;
- `warn_missing_model_keys`: a model route whose provider key is not in the environment.

Every refusal is a `StartupError`; `reported` turns it into one line on stderr and the exit
code, never a traceback. (PostgreSQL's reachability is checked where the store opens, by
`store.postgres_probe`, so it holds for every command.)
"""

from __future__ import annotations

import errno
import fnmatch
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from corral.config import Settings
from corral.errors import StartupError
from corral.hands._uids import UidRange, covered, mapped_ranges
from corral.model_routes import DEFAULT_ROUTES, ModelRoute
from corral.store.base import Page, ResourceStore
from corral.vault.crypto import Keyring, VaultKeyError
from corral.vault.keys import KEY_FILE, LoadedKeys
from corral.vault.secrets import SEALED, VAULT_KIND, bound_to, credential_kind

log = logging.getLogger("corral")
LISTEN_BACKLOG = 2048
"""uvicorn's default backlog."""
ID_MAPS = (Path("/proc/self/uid_map"), Path("/proc/self/gid_map"))
VAULTS_SAMPLED = 20
"""Newest vaults looked into for a sealed credential (a vault may have none)."""


@contextmanager
def reported() -> Iterator[None]:
    """Run the body; a `StartupError` (also alone inside an exception group, as task groups
    raise them) becomes its one line on stderr and its exit code."""
    try:
        yield
    except StartupError as exc:
        _fail(exc)
    except BaseExceptionGroup as group:
        found, rest = group.split(StartupError)
        if found is None or rest is not None:
            raise
        _fail(_first(found))


def _first(group: BaseExceptionGroup[StartupError]) -> StartupError:
    inner = group.exceptions[0]
    return inner if isinstance(inner, StartupError) else _first(inner)


def _fail(exc: StartupError) -> NoReturn:
    import typer
    from rich.console import Console
    from rich.markup import escape

    # soft_wrap: one line even when stderr is not a terminal (rich would wrap at 80 columns)
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/] {escape(exc.message)}")
    raise typer.Exit(exc.exit_code) from None


def is_postgres(settings: Settings) -> bool:
    """Whether the settings name a PostgreSQL database (else the embedded SQLite file)."""
    return (settings.database_url or "").startswith(("postgres://", "postgresql://"))


def sqlite_file(settings: Settings) -> Path:
    """The embedded database file: `sqlite:///path` if given, else `<data dir>/corral.db`."""
    url = settings.database_url
    return Path(url.removeprefix("sqlite:///")) if url else settings.sqlite_path


# ---- serve ----------------------------------------------------------------------------


def listen(host: str, port: int, setting: str = "--port / [server] port") -> socket.socket:
    """A listening TCP socket on host:port (an IPv6 literal if the host has a colon), as
    uvicorn would make it; the caller hands it to uvicorn. `setting` names where the port
    is configured, for the message.

    Raises:
        StartupError: the address is in use, not this machine's, or not allowed.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"cannot listen on {where}: address already in use (another process listens "
                f"there; stop it, or pick another port with {setting})"
            ) from None
        reason = exc.strerror or str(exc)
        raise StartupError(
            f"cannot listen on {where}: {reason} (check [server] host, and {setting})",
            exit_code=2,
        ) from None
    return sock


def check_database(settings: Settings) -> None:
    """On PostgreSQL, connect once now (the store connects again when it opens): before a
    process writes its data dir or generates keys for a database it cannot use.

    Raises:
        StartupError: unreachable, login refused, or no such database.
    """
    if is_postgres(settings):
        import anyio

        from corral.store.postgres_probe import probe

        anyio.run(probe, settings.database_url or "")


def refuse_api_only_sqlite(settings: Settings) -> None:
    """`--workers 0` is an API-only server; only PostgreSQL lets other processes run brains.

    Raises:
        StartupError: no brain slots on the embedded SQLite store.
    """
    if settings.workers < 1 and not is_postgres(settings):
        raise StartupError(
            f"--workers {settings.workers} (CORRAL_WORKERS, [server] workers) leaves no brain "
            "slots, and with the embedded SQLite store no other process can run this "
            "server's brains, so every session would wait forever: give it slots "
            "(--workers 1 or more), or use PostgreSQL (--database-url postgresql://…) with "
            "`corral worker` processes",
            exit_code=2,
        )


def check_sandbox_uids(settings: Settings, id_maps: tuple[Path, Path] = ID_MAPS) -> None:
    """As root, sandboxes run as uids of `sandbox_uid_range`; in a user namespace (a rootless
    container, a CI runner) only the ids it maps exist, and switching to another fails every
    provision with a bare EINVAL. Checked at start instead, naming the setting and the ids
    that are there.

    Raises:
        StartupError: part of the range is not mapped for uids or gids.
    """
    if os.geteuid() != 0:
        return  # sandboxes then run as the server's own user
    wanted = UidRange(*settings.sandbox_uid_range)
    for path in id_maps:
        try:
            ranges = mapped_ranges(path.read_text())
        except OSError:
            return  # no /proc: nothing to tell in advance
        if not covered(wanted, ranges):
            there = ", ".join(f"{first}-{last}" for first, last in ranges) or "none"
            raise StartupError(
                f"[server] sandbox_uid_range (CORRAL_SANDBOX_UID_RANGE) "
                f"{wanted.first}-{wanted.last} is not mapped in this user namespace "
                f"({path} maps {there}): choose a range inside the mapped ids, away from "
                "the ids of accounts, e.g. in a container started with a mapping of 0-65535, "
                '"20000-59999"',
                exit_code=2,
            )


# ---- admin commands -------------------------------------------------------------------


def _no_data_dir(data_dir: Path) -> StartupError:
    return StartupError(
        f"no Corral data dir at {data_dir.absolute()}: run this where `corral serve` runs, or "
        "name the data dir with --data-dir / CORRAL_DATA_DIR / [server] data_dir",
        exit_code=2,
    )


def require_data_dir(settings: Settings) -> None:
    """On SQLite, the directory the database file lives in must exist (PostgreSQL needs none).

    Raises:
        StartupError: it does not.
    """
    if is_postgres(settings):
        return
    if settings.database_url:
        parent = sqlite_file(settings).absolute().parent
        if not parent.is_dir():
            raise StartupError(
                f"no directory {parent} for the SQLite database of --database-url / "
                "CORRAL_DATABASE_URL",
                exit_code=2,
            )
    elif not settings.data_dir.is_dir():
        raise _no_data_dir(settings.data_dir)


def require_database(settings: Settings) -> None:
    """On SQLite, the database file must exist: reporting on (or changing) an empty database
    made on the spot says nothing true.

    Raises:
        StartupError: the data dir or its database is missing.
    """
    require_data_dir(settings)
    path = sqlite_file(settings)
    if not is_postgres(settings) and not path.is_file():
        raise StartupError(
            f"no Corral database at {path.absolute()}: `corral serve` (or `corral migrate`) "
            "creates it; check --data-dir / --database-url",
            exit_code=2,
        )


def require_vault_key(settings: Settings) -> None:
    """The vault key must be configured or already on disk; a command re-sealing secrets
    must not generate a key that opens none of them.

    Raises:
        StartupError: neither CORRAL_VAULT_KEY nor `<data dir>/vault.key`.
    """
    key_file = settings.data_dir / KEY_FILE
    if not settings.vault_key and not key_file.is_file():
        raise StartupError(
            f"no vault key: CORRAL_VAULT_KEY is not set and {key_file.absolute()} does not "
            "exist; set CORRAL_VAULT_KEY or name the data dir the server uses (--data-dir)",
            exit_code=2,
        )


# ---- at start -------------------------------------------------------------------------


def key_source(settings: Settings, loaded: LoadedKeys) -> str:
    """Where the vault keys came from, for messages."""
    if settings.vault_key or loaded.key_file is None:
        return "CORRAL_VAULT_KEY"
    made = " (generated at this start)" if loaded.generated else ""
    return f"{loaded.key_file.absolute()}{made}"


async def _newest_sealed(store: ResourceStore) -> tuple[str, str, str] | None:
    """(what, sealed token, bound-to) of the newest credential of the newest vaults, else of
    the newest repository token; None when nothing is sealed."""
    from corral.service.repositories import TOKEN_KIND, token_bound_to

    newest_first = Page(limit=VAULTS_SAMPLED, order="desc", include_archived=True)
    for vault in (await store.list_resources(VAULT_KIND, newest_first))[:VAULTS_SAMPLED]:
        one = Page(limit=1, order="desc")
        for row in (await store.list_resources(credential_kind(vault.id), one))[:1]:
            if row.body.get(SEALED):
                sealed = str(row.body[SEALED])
                return f"credential {row.id}", sealed, bound_to(vault.id, row.id)
    for row in (await store.list_resources(TOKEN_KIND, Page(limit=1, order="desc")))[:1]:
        return f"repository token {row.id}", str(row.body["sealed"]), token_bound_to(row.id)
    return None


async def check_vault_key(store: ResourceStore, keyring: Keyring, source: str) -> None:
    """Open one sealed value with the configured keys (a few reads).

    Raises:
        StartupError: it was sealed under a key none of them is; without this, a wrong key
            shows only when a session using a credential fails.
    """
    found = await _newest_sealed(store)
    if found is None:
        return
    what, token, bound = found
    try:
        keyring.open(token, bound)
    except VaultKeyError:
        sealed_by = (token.split(".") + ["", ""])[1] or "?"
        if sealed_by in keyring.key_ids:  # the right key: this one value is damaged
            log.warning("the sealed secret of %s does not open (damaged?)", what)
            return
        raise StartupError(
            f"the vault key is wrong: the stored credentials are sealed under vault key "
            f"{sealed_by}, and {source} holds {', '.join(keyring.key_ids)}; set "
            "CORRAL_VAULT_KEY to the key they were sealed with (several: newest first, "
            "comma-separated; docs/vaults.md), or, if that key is lost, start once with "
            "--accept-lost-vault-key and re-create the credentials",
            exit_code=2,
        ) from None


def _shadowed(route: ModelRoute, earlier: list[ModelRoute]) -> bool:
    """Whether an earlier route's pattern takes every name this route's pattern matches
    (checked on the pattern as a name: `*` and `claude-*` both take `claude-*`)."""
    return any(fnmatch.fnmatchcase(route.match, e.match) for e in earlier)


def warn_missing_model_keys(settings: Settings) -> list[str]:
    """Log one warning per model route whose API key variable is unset; returns them."""
    routes = [*settings.model_routes, *DEFAULT_ROUTES]
    warnings: list[str] = []
    for index, route in enumerate(routes):
        if route.provider == "anthropic":
            name = route.api_key_env or "ANTHROPIC_API_KEY"
        elif route.provider == "openai" and route.api_key_env:
            name = route.api_key_env
        else:
            continue
        if settings.env.get(name) or _shadowed(route, routes[:index]):
            continue
        warnings.append(
            f"{name} is not set: agents on {route.match} models ({route.provider} provider) "
            f"will fail with session.error until it is (export {name}=…, or route "
            f"{route.match} elsewhere with [[models.routes]])"
        )
    for line in warnings:
        log.warning("%s", line)
    return warnings
