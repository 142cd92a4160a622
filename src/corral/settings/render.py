"""The settings as people read them: `corral config show` (effective values, each with its
source, secrets redacted) and docs/configuration.md (generated from the model)."""

from __future__ import annotations

import dataclasses
import json
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Union, get_args, get_origin
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from corral.model_routes import ModelRoute
from corral.settings.model import WEB_SEARCH_KEYS, Key, Settings, default_of, env_names, keys
from corral.settings.sources import CONFIG_VARIABLE, DEFAULT_FILE, Loaded
from corral.web_search_config import WebSearchConfig

REDACTED = "***"
_SECRET_PARAM = re.compile(r"pass|secret|token|key|auth|credential", re.IGNORECASE)
_HEADER = "| key | environment | type | default | description |"
DOCS_COMMAND = "uv run corral config docs > docs/configuration.md"


def redact_url(text: str) -> str:
    """`text` with a URL's password and any secret-looking query parameter replaced."""
    if "://" not in text:
        return text
    parts = urlsplit(text)
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:{REDACTED}@{host}"
    query = urlencode(
        [(k, REDACTED if _SECRET_PARAM.search(k) else v) for k, v in parse_qsl(parts.query)],
        safe="*",
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _plain(value: Any) -> Any:
    """`value` as JSON-able data, URLs redacted."""
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, WebSearchConfig):
        fields = dataclasses.asdict(value)
        fields.pop("api_key")
        return _plain({k: v for k, v in fields.items() if v is not None})
    if isinstance(value, ModelRoute):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return _plain({k: v for k, v in fields.items() if v not in (None, {})})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def shown(name: str, key: Key, value: Any) -> str:
    """One setting's value as `corral config show` prints it."""
    if value is None or (key.secret and not value):
        return "(unset)"
    if key.secret and name != "database_url":
        count = len(value) if isinstance(value, tuple) else len(str(value).split(","))
        return f"{REDACTED} ({count} given)"
    if name == "sandbox_uid_range":
        return f'"{value[0]}-{value[1]}"'
    return json.dumps(_plain(value), ensure_ascii=False)


def show(loaded: Loaded) -> str:
    """Every setting, its effective value and where it came from."""
    settings = loaded.settings
    rows = [
        (key.display, shown(name, key, getattr(settings, name)), settings.source(name))
        for name, key in keys().items()
    ]
    width = max(len(r[0]) for r in rows)
    value_width = min(40, max(len(r[1]) for r in rows))
    file = loaded.file or "none"
    head = f"# flags > environment > config file ({file}) > defaults; secrets redacted"
    lines = (f"{s:<{width}}  {v:<{value_width}}  # {src}" for s, v, src in rows)
    return "\n".join([head, *lines]) + "\n"


def _type_name(name: str, key: Key) -> str:
    if key.doc_type:
        return key.doc_type
    annotation = Settings.model_fields[name].annotation
    optional = get_origin(annotation) in (Union, types.UnionType)
    if optional:
        annotation = next(a for a in get_args(annotation) if a is not type(None))
    if get_origin(annotation) is tuple:
        text = "list of strings"
    else:
        names: dict[object, str] = {str: "string", int: "integer", float: "number"}
        names.update({bool: "boolean", Path: "path"})
        text = names.get(annotation, str(annotation))
    return text


def _default(name: str, key: Key) -> str:
    value = default_of(name)
    if value in (None, (), {}):
        return "unset"
    if key.resolve == "path":
        return f"`{value}` (in the working directory)"
    if name == "sandbox_uid_range":
        return f"`{value[0]}-{value[1]}`"
    return f"`{json.dumps(_plain(value))}`"


def _variables(name: str, key: Key) -> str:
    if name == "web_search":
        return "`CORRAL_WEB_SEARCH_<KEY>` (one per key, below)"
    form = {"csv": " (comma-separated)", "json": " (JSON)"}.get(key.env, "")
    if Settings.model_fields[name].annotation is bool:
        form = " (`1` or `0`)"
    return ", ".join(f"`{v}`" for v in env_names(name, key)) + form


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def docs() -> str:
    """docs/configuration.md."""
    lines = [_INTRO]
    section = ""
    for name, key in keys().items():
        if key.path[0] != section:
            section = key.path[0]
            lines += ["", f"## [{section}]", "", _HEADER, "|---|---|---|---|---|"]
        description = _cell(Settings.model_fields[name].description or "")
        row = [f"`{key.display}`", _variables(name, key), _type_name(name, key)]
        lines.append("| " + " | ".join([*row, _default(name, key), description]) + " |")
    lines += ["", "The keys of `[web_search]`, each also a variable:", ""]
    lines += ["| key | environment | description |", "|---|---|---|"]
    for sub, text in WEB_SEARCH_KEYS.items():
        lines.append(f"| `{sub}` | `CORRAL_WEB_SEARCH_{sub.upper()}` | {_cell(text)} |")
    return "\n".join(lines) + "\n"


_INTRO = f"""# Configuration

<!-- Generated from `corral.settings.model`; edit the model, then run `{DOCS_COMMAND}`. -->

Every setting of Corral has a key in a TOML file and a `CORRAL_*` environment variable; the
commands take the most common ones as flags too. The sources, strongest first:

1. command-line flags (`corral serve --port 9000`);
2. environment variables (`CORRAL_PORT=9000`);
3. the config file: `{DEFAULT_FILE}` in the working directory if it exists, or the file
   `{CONFIG_VARIABLE}` names (which must exist);
4. the defaults below.

`corral config check [--config PATH]` validates them without starting anything (exit 0, or
exit 2 with one line naming the problem); `corral config show` prints the effective value of
every setting and where it came from (`default`, `file`, `env` or `flag`), with API keys, the
vault key, the environment key and any password or token in a URL redacted.

Rules:

- **Unknown keys and sections** in the file are an error naming the key, the file and the
  nearest valid key (`unknown section [sevrer] in /etc/corral.toml; did you mean [server]?`).
- **Unknown `CORRAL_*` variables** are a one-line warning naming the nearest valid one, not an
  error: the environment is shared with other programs, shells and wrappers, and a stray
  variable cannot change what Corral does.
- **Types** are checked at load: an error names the key and the file, or the variable
  (`CORRAL_WORKERS should be a valid integer, …, got 'abc'`). Variables take numbers as text,
  booleans as `1` or `0`, lists comma-separated and tables as JSON. An empty variable is unset.
- **Paths** are made absolute once, at load: a path written in the config file is relative to
  the file's directory, one from a variable, a flag or a default to the working directory (so
  the default data dir is `.corral` in the folder `corral` was started from). `~` is expanded.
  `bwrap` is looked up on `PATH` unless it contains a `/`.
- **Database URLs**: `postgresql://…` (or `postgres://…`), `sqlite:///path` or a plain file
  path; any other scheme is an error.
- Model routes, `[skills.anthropic]` and `[web_search]` keep their own checks (README
  "Models", docs/skills.md, docs/web_search.md); their errors name the entry at fault.

Provider credentials are not settings: routes and `[web_search]` name the variable holding a
key (`api_key_env`), and the key is read from the server's environment.
"""
