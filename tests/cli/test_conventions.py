"""CLI conventions, as a user meets them: `-h` is `--help` on every command, `corral --version`
prints the package's version, and each command's help names the default, environment variable
and TOML key of every setting its options set."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer

from corral.cli import app

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {
    "--host": "[default: 127.0.0.1] [env: CORRAL_HOST; toml: [server] host]",
    "--port": "[default: 8080] [env: CORRAL_PORT; toml: [server] port]",
    "--data-dir": "[env: CORRAL_DATA_DIR; toml: [server] data_dir]",
    "--database-url": "[env: CORRAL_DATABASE_URL; toml: [server] database_url]",
    "--workers": "[default: 256] [env: CORRAL_WORKERS; toml: [server] workers]",
    "--metrics-port": "[default: none] [env: CORRAL_METRICS_PORT; toml: [metrics] port]",
}
"""What each setting-backed option's help must say."""
OTHER_VARIABLES = {
    ("serve",): ["CORRAL_API_KEYS"],
    ("hands",): ["CORRAL_ENVIRONMENT_KEY"],
    ("vault-rekey",): ["CORRAL_VAULT_KEY"],
}
"""Variables a command reads that no option sets."""


def _commands(group: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command under `group` (typer's click commands), groups included, by its words."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for name, command in getattr(group, "commands", {}).items():
        found.append(((*prefix, name), command))
        found += _commands(command, (*prefix, name))
    return found


COMMANDS = _commands(typer.main.get_command(app))


def _corral(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        env={**env, "COLUMNS": "100"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _flat(text: str) -> str:
    """Help as words: rich's box and wrapping removed."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_h_is_help_and_version_prints_the_packages() -> None:
    top = _corral("-h")
    assert top.returncode == 0, top.stderr
    assert top.stdout == _corral("--help").stdout
    flat = _flat(top.stdout)
    assert "-h" in flat and "--version" in flat
    assert "[env: CORRAL_CONFIG; default: ./corral.toml]" in flat
    assert "CORRAL_LOG_LEVEL" in flat
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = _corral("--version")
    assert (done.returncode, done.stdout) == (0, f"corral {version}\n"), done.stderr


@pytest.mark.parametrize("words", [w for w, _ in COMMANDS], ids=" ".join)
def test_every_command_takes_h_and_names_its_settings(words: tuple[str, ...]) -> None:
    short, long = _corral(*words, "-h"), _corral(*words, "--help")
    assert short.returncode == 0, short.stderr
    assert short.stdout == long.stdout
    flat = _flat(short.stdout)
    command = dict(COMMANDS)[words]
    for param in command.params:
        flag = max(param.opts, key=len)
        if flag in SETTINGS:
            assert SETTINGS[flag] in flat, f"{' '.join(words)} {flag}: {flat}"
    for variable in OTHER_VARIABLES.get(words, []):
        assert variable in flat, f"{' '.join(words)} does not name {variable}"


@pytest.mark.parametrize("words", [w for w, c in COMMANDS if c.params], ids=" ".join)
def test_every_option_shows_its_default(words: tuple[str, ...]) -> None:
    """An option defaulting to None (the settings loader decides) says what that means."""
    for param in dict(COMMANDS)[words].params:
        if param.param_type_name != "option" or param.required or param.is_flag:
            continue
        help_text = param.help or ""
        shows = param.default is not None or param.multiple or "[default: " in help_text
        assert shows, f"{' '.join(words)} {param.opts}: no default in {help_text!r}"
        if param.default is None and param.opts[-1] in SETTINGS:
            assert "[env: CORRAL_" in help_text


def _readme_commands() -> list[list[str]]:
    """The README's command table: each row's command words, alternatives (`a|b`) split."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    spans = re.findall(r"^\| `corral ([^`]*)` \|", section, flags=re.MULTILINE)
    return [span.replace("\\|", "|").split() for span in spans]


@pytest.mark.parametrize("words", [w for w, _ in COMMANDS], ids=" ".join)
def test_the_readme_command_table_lists_every_command(words: tuple[str, ...]) -> None:
    rows = _readme_commands()
    listed = any(
        len(row) >= len(words) and all(word in row[i].split("|") for i, word in enumerate(words))
        for row in rows
    )
    assert listed, f"corral {' '.join(words)} is not in README's Commands table"
