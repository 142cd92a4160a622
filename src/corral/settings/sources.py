"""Reading the settings: corral.toml, then `CORRAL_*` variables, then flags, each value's
origin recorded so that an error and `corral config show` can name it.

Paths written in the file are made absolute against the file's directory (so a config file
can sit beside its data dir wherever it is started from); paths from variables, flags and
defaults against the working directory. Unknown variables starting with `CORRAL_` are a
warning, not an error: the environment is shared with other programs and wrappers.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from corral.settings.checks import (
    FullTracesUrl,
    absolute_database,
    absolute_path,
    absolute_program,
)
from corral.settings.model import WEB_SEARCH_KEYS, Key, Settings, env_names, keys

CONFIG_VARIABLE = "CORRAL_CONFIG"
DEFAULT_FILE = "corral.toml"
WEB_SEARCH_VARIABLES = tuple(f"CORRAL_WEB_SEARCH_{k.upper()}" for k in WEB_SEARCH_KEYS)
_FULL_URL_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",)


class ConfigError(ValueError):
    """A one-line message naming the setting at fault and where its value came from."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where one value came from."""

    kind: Literal["default", "file", "env", "flag"]
    name: str = ""
    """The TOML key, variable or flag."""
    file: Path | None = None

    def __str__(self) -> str:
        if self.kind == "file":
            return f"file {self.file}"
        return self.kind if self.kind == "default" else f"{self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Loaded:
    """Validated settings, the file they were read from (if any), warnings to show."""

    settings: Settings
    file: Path | None
    warnings: tuple[str, ...]


def load(
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    *,
    require_file: bool = False,
) -> Loaded:
    """Flags (`overrides`, None meaning unset) > environment > file > defaults, validated.

    `config_file` (or else `CORRAL_CONFIG`) names the file; a named file must exist when
    `require_file` (the `--config` flag) or when it comes from `CORRAL_CONFIG`.

    Raises:
        ConfigError: the first problem, on one line.
    """
    env = dict(os.environ if environ is None else environ)
    path = _config_path(config_file, env, require_file)
    values = _gathered(path, env, overrides or {})
    origins = {name: origin for name, (_, origin) in values.items()}
    try:
        settings = Settings(
            env=env,
            origins={name: str(origin) for name, origin in origins.items()},
            **{name: value for name, (value, _) in values.items()},
        )
    except ValidationError as exc:
        raise ConfigError(describe(exc, origins)) from None
    return Loaded(settings, path if path.exists() else None, unknown_variables(env))


def _gathered(
    path: Path, env: Mapping[str, str], overrides: Mapping[str, Any]
) -> dict[str, tuple[Any, Origin]]:
    """Each set setting's raw value and origin, the strongest source winning."""
    values: dict[str, tuple[Any, Origin]] = {}
    if path.exists():
        values.update(read_file(path))
    values.update(read_env(env))
    web_search_variables = [v for v in WEB_SEARCH_VARIABLES if env.get(v)]
    if web_search_variables:  # merged over the file's table by the model's validator
        table = values.get("web_search", (None, None))[0]
        values["web_search"] = (table, Origin("env", ", ".join(web_search_variables)))
    for name, value in overrides.items():
        if value is not None:
            values[name] = (value, Origin("flag", "--" + name.replace("_", "-")))
    return values


def _config_path(config_file: Path | None, env: Mapping[str, str], required: bool) -> Path:
    named_by = "--config"
    if config_file is None and env.get(CONFIG_VARIABLE, "").strip():
        config_file, named_by, required = Path(env[CONFIG_VARIABLE].strip()), CONFIG_VARIABLE, True
    path = absolute_path(config_file or DEFAULT_FILE, Path.cwd())
    if required and not path.exists():
        raise ConfigError(f"config file {path} (named by {named_by}) does not exist")
    return path


def read_file(path: Path) -> dict[str, tuple[Any, Origin]]:
    """The settings a TOML file sets, paths made absolute against its directory.

    Raises:
        ConfigError: unreadable, not TOML, or an unknown section or key (with the nearest
            valid one).
    """
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    by_path = {key.path: name for name, key in keys().items()}
    found: dict[str, Any] = {}
    _walk(doc, (), by_path, path, found)
    base, every = path.parent, keys()
    out: dict[str, tuple[Any, Origin]] = {}
    for name, value in found.items():
        key = every[name]
        if isinstance(value, bool) and Settings.model_fields[name].annotation is not bool:
            # pydantic would take `workers = true` for 1
            raise ConfigError(f"{key.display} must not be true or false, got {value} (in {path})")
        out[name] = (_resolved(key, value, base), Origin("file", key.display, path))
    return out


def _walk(
    table: Mapping[str, Any],
    prefix: tuple[str, ...],
    by_path: Mapping[tuple[str, ...], str],
    file: Path,
    out: dict[str, Any],
) -> None:
    sections = {p[:i] for p in by_path for i in range(1, len(p))}
    for key, value in table.items():
        here = (*prefix, key)
        if here in by_path:
            out[by_path[here]] = value
        elif here in sections:
            if not isinstance(value, dict):
                raise ConfigError(f"[{'.'.join(here)}] must be a table (in {file})")
            _walk(value, here, by_path, file, out)
        else:
            raise ConfigError(_unknown(here, isinstance(value, dict), by_path, sections, file))


def _unknown(
    here: tuple[str, ...],
    is_table: bool,
    by_path: Mapping[tuple[str, ...], str],
    sections: set[tuple[str, ...]],
    file: Path,
) -> str:
    *prefix, key = here
    if is_table:
        what = f"unknown section [{'.'.join(here)}] in"
    elif prefix:
        what = f"unknown key {key!r} in [{'.'.join(prefix)}] of"
    else:
        what = f"unknown key {key!r} outside any section of"
    depth = len(prefix)
    siblings = {
        p[depth]: p[: depth + 1]
        for p in (*by_path, *sections)
        if len(p) > depth and list(p[:depth]) == prefix
    }
    close = difflib.get_close_matches(key, list(siblings), n=1)
    if close:
        target = siblings[close[0]]
    else:  # `port = 1` at the top, or a key in the wrong section: match the leaf names
        leaves: dict[str, tuple[str, ...]] = {}
        for path in by_path:  # [server] first: `port` means the server's
            leaves.setdefault(path[-1], path)
        near = difflib.get_close_matches(key, list(leaves), n=1, cutoff=0.8)
        if not near:
            valid = ", ".join(sorted(siblings))
            return f"{what} {file} (valid here: {valid})"
        target = leaves[near[0]]
    hint = keys()[by_path[target]].display if target in by_path else f"[{'.'.join(target)}]"
    return f"{what} {file}; did you mean {hint}?"


def _resolved(key: Key, value: Any, base: Path) -> Any:
    """A path written in the file, made absolute against the file's directory."""
    if not isinstance(value, str) or not value:
        return value
    if key.resolve == "path":
        return absolute_path(value, base)
    if key.resolve == "program":
        return absolute_program(value, base)
    if key.resolve == "database":
        try:
            return absolute_database(value, base)
        except ValueError:
            return value  # refused by the model's validator, which names the file
    return value


def read_env(env: Mapping[str, str]) -> dict[str, tuple[Any, Origin]]:
    """The settings the environment sets (an empty variable counts as unset).

    Raises:
        ConfigError: a variable that must hold JSON does not.
    """
    out: dict[str, tuple[Any, Origin]] = {}
    for name, key in keys().items():
        if name == "web_search":
            continue  # its validator merges CORRAL_WEB_SEARCH_* over the table, key by key
        for variable in env_names(name, key):
            text = env.get(variable, "").strip()
            if text:
                out[name] = (_parsed(key, variable, text), Origin("env", variable))
                break
    return out


def _parsed(key: Key, variable: str, text: str) -> Any:
    if key.env == "csv":
        return [part.strip() for part in text.split(",") if part.strip()]
    if key.env == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{variable} must hold JSON ({key.doc_type} as in corral.toml's "
                f"{key.display}): {exc.msg} at column {exc.colno}"
            ) from None
    return FullTracesUrl(text) if variable in _FULL_URL_VARIABLES else text


def known_variables() -> tuple[str, ...]:
    """Every variable Corral's settings read."""
    names = [
        v for name, key in keys().items() if name != "web_search" for v in env_names(name, key)
    ]
    return (CONFIG_VARIABLE, *names, *WEB_SEARCH_VARIABLES)


def unknown_variables(env: Mapping[str, str]) -> tuple[str, ...]:
    """One warning per `CORRAL_*` variable no setting reads, naming the nearest that does.

    `CORRAL_TEST_*` belong to the test suite and CI (which set them for every process they
    start), not to a server, so they are left alone."""
    known = known_variables()
    corral_known = [v for v in known if v.startswith("CORRAL_")]
    out = []
    ours = (v for v in env if v.startswith("CORRAL_") and not v.startswith("CORRAL_TEST_"))
    for variable in sorted(v for v in ours if v not in known):
        close = difflib.get_close_matches(variable, corral_known, n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else "see docs/configuration.md"
        out.append(f"ignoring unknown environment variable {variable} ({hint})")
    return tuple(out)


def describe(exc: ValidationError, origins: Mapping[str, Origin]) -> str:
    """The first error of `exc` as one line naming the setting and its source."""
    errors = exc.errors()
    line = _one(errors[0], origins)
    more = len(errors) - 1
    return line + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")


def _one(error: ErrorDetails, origins: Mapping[str, Origin]) -> str:
    name = str(error["loc"][0]) if error["loc"] else ""
    key = keys().get(name)
    origin = origins.get(name, Origin("default"))
    text = error["msg"].removeprefix("Value error, ")
    if error["type"] != "value_error":
        text = re.sub(r" for <class '[\w.]+'>", "", re.sub(r"^Input (should|is)", r"\1", text))
        if key is None or not key.secret:
            text += f", got {error['input']!r}"
    if key is not None and key.named_errors and error["type"] == "value_error":
        if origin.kind == "file":
            return f"{text} (in {origin.file})"
        return text if origin.kind == "default" else f"{text} (from {origin.name})"
    if origin.kind == "file":
        return f"{origin.name} {text} (in {origin.file})"
    if origin.kind == "default":
        return f"{key.display if key else name} {text}"
    return f"{origin.name} {text}"
