"""`corral config check|show|docs`: validate the settings, print them, print their reference.

Also the one way every command loads its settings (`load_or_exit`): a bad setting is one
line naming it and exit code 2, never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from corral.settings import Loaded, load
from corral.settings.render import docs, show

config_app = typer.Typer(
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    help="Validate the settings (corral.toml, CORRAL_* variables) or print them and their "
    "reference (docs/configuration.md).",
)
console = Console(stderr=True)
log = logging.getLogger("corral.config")

ConfigFile = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help=escape(
            "The TOML file to read (it must exist). [default: ./corral.toml] [env: CORRAL_CONFIG]"
        ),
    ),
]


def load_or_exit(overrides: Mapping[str, Any] | None = None, config: Path | None = None) -> Loaded:
    """The settings, or a one-line `configuration error: …` and exit code 2."""
    try:
        loaded = load(overrides, config_file=config, require_file=config is not None)
    except ValueError as exc:  # ConfigError, or a path the OS refuses (a NUL byte)
        # escaped: messages name settings like `[web_search] url`, which rich reads as markup
        # soft_wrap: one line however long, for people and for log collectors alike
        console.print(f"[red]configuration error:[/] {escape(str(exc))}", soft_wrap=True)
        raise typer.Exit(2) from None
    for warning in loaded.warnings:
        log.warning("%s", warning)
    logging.getLogger().setLevel(loaded.settings.log_level)
    return loaded


@config_app.command()
def check(config: ConfigFile = None) -> None:
    """Validate the config file and CORRAL_* variables without starting anything."""
    loaded = load_or_exit(config=config)
    origins = loaded.settings.origins.values()
    from_file = sum(1 for o in origins if o.startswith("file "))
    from_env = sum(1 for o in origins if o.startswith("env "))
    where = loaded.file or "no config file"
    typer.echo(f"configuration OK ({where}: {from_file} set; environment: {from_env} set)")


@config_app.command("show")
def show_settings(config: ConfigFile = None) -> None:
    """Print every setting's effective value and its source (secrets redacted)."""
    typer.echo(show(load_or_exit(config=config)), nl=False)


@config_app.command("docs")
def print_docs() -> None:
    """Print docs/configuration.md, generated from the settings model."""
    typer.echo(docs(), nl=False)
