"""Model routes as configured in corral.toml (`[[models.routes]]`): plain data and its parser.

Configuration, not providers: this module imports nothing of `corral.models`, so `config.py`
can parse routes without loading any provider SDK; `models.router` turns routes into clients.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args
from urllib.parse import urlsplit

from corral.context_window import CONTEXT_KEYS, parse_context
from corral.pricing import Price, parse_price

Provider = Literal["anthropic", "openai", "scripted"]
_PROVIDERS: tuple[str, ...] = get_args(Provider)
_STR_KEYS = ("match", "provider", "base_url", "api_key_env", "model")
_ROUTE_KEYS = (*_STR_KEYS, "price", *CONTEXT_KEYS)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRoute:
    """Which provider serves the model names matching `match`."""

    match: str
    """An fnmatch pattern over `agent.model`, e.g. `claude-*`."""
    provider: Provider
    base_url: str | None = None
    """The provider's API root; required for `openai` (include `/v1`)."""
    api_key_env: str | None = None
    """The NAME of the environment variable holding the key; never the key itself."""
    model: str | None = None
    """A model name sent upstream instead of the agent's (e.g. `llama3.1:8b`)."""
    price: Price | None = None
    """List price of the models it serves (None: `pricing.DEFAULT_PRICES`, if any)."""
    context: dict[str, Any] = field(default_factory=dict)
    """`context_window` / `compaction_threshold` / `compaction_model`, as
    `context_window.parse_context` returns them (empty: the defaults)."""

    def __post_init__(self) -> None:
        if self.provider == "openai" and not self.base_url:
            raise ValueError(f"model route {self.match!r}: provider 'openai' needs a base_url")


DEFAULT_ROUTES: tuple[ModelRoute, ...] = (
    ModelRoute(match="corral-scripted*", provider="scripted"),
    ModelRoute(match="claude-*", provider="anthropic"),
)


def parse_routes(table: Mapping[str, Any]) -> list[ModelRoute]:
    """Parse the `[[models.routes]]` entries of the `[models]` table.

    Raises:
        ValueError: an entry is malformed; the message names the entry and the field.
    """
    if not isinstance(table, Mapping):
        raise ValueError("[models] must be a table")
    entries = table.get("routes", [])
    if not isinstance(entries, list):
        raise ValueError("models.routes must be an array of tables ([[models.routes]])")
    routes = [_parse_route(i + 1, entry) for i, entry in enumerate(entries)]
    for number, route in enumerate(routes, start=1):
        summariser = route.context.get("compaction_model")
        every = (*routes, *DEFAULT_ROUTES)
        if summariser and not any(fnmatch.fnmatchcase(summariser, r.match) for r in every):
            raise ValueError(
                f"[[models.routes]] entry {number}: compaction_model {summariser!r} matches no "
                "model route"
            )
    return routes


def _parse_route(number: int, entry: Any) -> ModelRoute:
    where = f"[[models.routes]] entry {number}"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a table")
    unknown = sorted(set(entry) - set(_ROUTE_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {list(_ROUTE_KEYS)}")
    fields = {key: _optional_str(where, key, entry.get(key)) for key in _STR_KEYS}
    if not fields["match"]:
        raise ValueError(f"{where}: 'match' is required (an fnmatch pattern such as 'claude-*')")
    provider = fields["provider"]
    if provider not in _PROVIDERS:
        raise ValueError(f"{where}: 'provider' must be one of {list(_PROVIDERS)}")
    base_url = fields["base_url"]
    if base_url is not None:
        _check_base_url(where, base_url)
    if provider == "openai" and base_url is None:
        raise ValueError(f"{where}: provider 'openai' needs a 'base_url' (ending in /v1)")
    key_env = fields["api_key_env"]
    if key_env is not None and not _ENV_NAME.match(key_env):
        # The value is not echoed: it may be a key pasted where its variable's name belongs.
        raise ValueError(
            f"{where}: 'api_key_env' must be the NAME of an environment variable "
            "(letters, digits, underscores), not the key itself"
        )
    return ModelRoute(
        match=fields["match"],
        provider=cast(Provider, provider),
        base_url=base_url,
        api_key_env=key_env,
        model=fields["model"],
        price=parse_price(where, entry["price"]) if "price" in entry else None,
        context=parse_context(where, entry),
    )


def _optional_str(where: str, key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return value


def _check_base_url(where: str, base_url: str) -> None:
    """Refuse at load what a provider could not call: the URL is the API root, nothing more."""
    bad = ValueError(f"{where}: 'base_url' must be an http:// or https:// URL with a host")
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        raise bad from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{where}: 'base_url' takes no query, fragment or credentials")
