"""The options the `corral` commands share, and the conventions every command follows: `-h`
as well as `--help`, `--version`, and each setting's default, environment variable and TOML key
in its `--help`.

The names are written into the help text rather than given to typer as `envvar=`: the settings
loader alone reads the environment and the config file (one precedence, one error format).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

import corral
from corral.config import Settings

CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"]}
"""`context_settings` of every typer app and command (subcommands inherit it)."""

EPILOG = escape(
    "Options override the environment, which overrides the config file "
    "[env: CORRAL_CONFIG; default: ./corral.toml]. Log level: CORRAL_LOG_LEVEL (default INFO)."
)


def default_of(name: str) -> str:
    """A setting's default, as `--help` shows it."""
    return str(Settings.model_fields[name].default)


def setting_help(text: str, *, env: str, toml: str, default: str | None = None) -> str:
    """Help of an option backed by a setting: `text [default: …] [env: …; toml: …]`.

    Escaped, because rich would read `[server]` as markup and drop it."""
    shown = default_of(toml.rpartition(" ")[2]) if default is None else default
    return escape(f"{text} [default: {shown}] [env: {env}; toml: {toml}]")


DATA_DIR_DEFAULT = ".corral in the working directory"

Host = Annotated[
    str | None,
    typer.Option(help=setting_help("Interface to bind.", env="CORRAL_HOST", toml="[server] host")),
]
Port = Annotated[
    int | None,
    typer.Option(help=setting_help("Port to bind.", env="CORRAL_PORT", toml="[server] port")),
]
DataDir = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help=setting_help(
            "Data directory.",
            env="CORRAL_DATA_DIR",
            toml="[server] data_dir",
            default=DATA_DIR_DEFAULT,
        ),
    ),
]
DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help=setting_help(
            "postgresql://… or sqlite:///path.",
            env="CORRAL_DATABASE_URL",
            toml="[server] database_url",
            default="sqlite in the data directory",
        ),
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        help=setting_help(
            "Brain slots in this process.", env="CORRAL_WORKERS", toml="[server] workers"
        )
    ),
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        help=setting_help(
            "Serve GET /metrics on this port (host: [server] host).",
            env="CORRAL_METRICS_PORT",
            toml="[metrics] port",
            default="none",
        )
    ),
]


def version() -> str:
    """`corral VERSION`, from the metadata of the distribution that installed the command
    (whatever it is named), or the package's own when run from a source tree."""
    for script in importlib.metadata.entry_points(group="console_scripts", name="corral"):
        if script.value == "corral.cli:main" and script.dist is not None:
            return f"corral {script.dist.version}"
    return f"corral {corral.__version__}"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version())
        raise typer.Exit()


Version = Annotated[
    bool,
    typer.Option(
        "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
    ),
]
