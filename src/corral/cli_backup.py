"""`corral backup PATH` and `corral restore PATH --data-dir DIR` (docs/operations.md), and the
command line's answer to a database newer than this build.

Backups run beside a live server: the embedded database is copied with SQLite's backup API
from a connection of this process, never by copying the file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from corral.cli_config import load_or_exit
from corral.cli_options import DatabaseUrl, DataDir
from corral.config import Settings
from corral.store.backup import BackupError, Manifest, backup, restore
from corral.store.schema import SchemaTooNew

EXIT_REFUSED = 2


def register_backup(app: typer.Typer) -> None:
    """Add `backup` and `restore` to the `corral` command."""
    app.command("backup")(backup_command)
    app.command("restore")(restore_command)


@contextmanager
def refuse_newer_schema() -> Iterator[None]:
    """A database migrated by a newer Corral stops any command with one line naming both
    versions and what to do, and exit code 2; no traceback."""
    try:
        yield
    except SchemaTooNew as exc:
        _fail(str(exc))
    except BaseExceptionGroup as group:  # raised inside a task group
        found, rest = group.split(SchemaTooNew)
        if found is None:
            raise
        first = found.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        if rest is not None:
            raise rest from first
        _fail(str(first))


def backup_command(
    path: Annotated[Path, typer.Argument(help="The backup file to write (.tar, or .tar.gz).")],
    data_dir: DataDir = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Back up the data directory and the embedded database, online (the server may run)."""
    settings = _settings(data_dir, database_url)
    url = settings.database_url or ""
    postgres = url.startswith(("postgres://", "postgresql://"))
    sqlite_db = None if postgres else _sqlite_path(settings)
    try:
        manifest = backup(settings.data_dir, path, sqlite_db=sqlite_db)
    except (BackupError, OSError) as exc:
        _fail(f"backup failed: {exc}")
    print(f"backed up {settings.data_dir} to {path}: {_summary(manifest)}")
    if postgres:
        print(
            "the database is in PostgreSQL and is not in this file: back it up with pg_dump "
            "(docs/operations.md)"
        )


def restore_command(
    path: Annotated[Path, typer.Argument(help="A file written by `corral backup`.")],
    data_dir: DataDir = None,
) -> None:
    """Restore a backup into a new data directory (it must be empty or missing)."""
    data_dir = load_or_exit({"data_dir": data_dir}).settings.data_dir
    try:
        manifest = restore(path, data_dir)
    except (BackupError, OSError) as exc:
        _fail(f"restore failed: {exc}")
    print(f"restored {path} into {data_dir}: {_summary(manifest)}")
    if manifest.store == "postgresql":
        print("restore the PostgreSQL database with pg_restore too (docs/operations.md)")


def _settings(data_dir: Path | None, database_url: str | None) -> Settings:
    return load_or_exit({"data_dir": data_dir, "database_url": database_url}).settings


def _sqlite_path(settings: Settings) -> Path:
    url = settings.database_url or ""
    return Path(url.removeprefix("sqlite:///")) if url else settings.sqlite_path


def _summary(manifest: Manifest) -> str:
    schema = "" if manifest.schema_version is None else f", schema {manifest.schema_version}"
    return (
        f"{manifest.files} file(s), {manifest.store}{schema}, taken {manifest.created_at} "
        f"by Corral {manifest.corral_version}"
    )


def _fail(message: str) -> NoReturn:
    # Plain stderr, not rich: one line however wide the message, never markup-mangled.
    # SystemExit, not typer.Exit: `refuse_newer_schema` runs outside typer's own handling.
    print(message, file=sys.stderr)
    raise SystemExit(EXIT_REFUSED)
