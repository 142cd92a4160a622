"""The operator's web search provider (`[web_search]` in corral.toml, `CORRAL_WEB_SEARCH_*`).

Configuration only: plain data and its parser, no HTTP (`corral.tools.web_search` runs the
searches). `config.py` imports this, so it must stay free of the rest of Corral.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

Provider = Literal["searxng", "brave", "tavily"]
PROVIDERS: tuple[str, ...] = get_args(Provider)
DEFAULT_URLS: dict[str, str] = {
    "brave": "https://api.search.brave.com",
    "tavily": "https://api.tavily.com",
}
"""API roots of the hosted providers; `url` overrides them (a proxy, or a test stand-in)."""
_KEYS = ("provider", "url", "api_key_env", "max_results", "max_uses", "timeout_seconds")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WHERE = "[web_search]"


@dataclass(frozen=True, slots=True, kw_only=True)
class WebSearchConfig:
    """A validated provider configuration; `api_key` was read from `api_key_env` at load."""

    provider: Provider
    url: str
    """The provider's root: SearXNG's base (`/search` is appended) or the hosted API's."""
    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False)
    max_results: int = 10
    """Results asked of the provider per search (before domain filtering)."""
    max_uses: int | None = None
    """Searches one turn may make when the agent's config sets no lower `max_uses`."""
    timeout_seconds: float = 15.0
    """Whole-request budget for one provider call; beyond it the model gets an error result."""


def parse_web_search(
    table: object, env: Mapping[str, str], *, where: str = _WHERE
) -> WebSearchConfig | None:
    """The `[web_search]` table merged with `CORRAL_WEB_SEARCH_<KEY>` overrides, validated.

    None when neither names a provider (web search stays unavailable). Raises ValueError
    naming the setting at fault; a missing API key variable is named, its value never shown.
    """
    if table is None:
        table = {}
    if not isinstance(table, Mapping):
        raise ValueError(f"{where} must be a table")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {list(_KEYS)}")
    merged: dict[str, Any] = dict(table)
    for key in _KEYS:
        value = env.get(f"CORRAL_WEB_SEARCH_{key.upper()}")
        if value:
            merged[key] = value
    if not merged.get("provider"):
        if merged:
            raise ValueError(f"{where} provider: required (one of {list(PROVIDERS)})")
        return None
    return _validated(merged, env, where)


def _validated(values: dict[str, Any], env: Mapping[str, str], where: str) -> WebSearchConfig:
    provider = values["provider"]
    if provider not in PROVIDERS:
        raise ValueError(f"{where} provider: must be one of {list(PROVIDERS)}, got {provider!r}")
    url = _url(values.get("url"), provider, where)
    key_env, key = _api_key(values.get("api_key_env"), provider, env, where)
    max_uses = values.get("max_uses")
    return WebSearchConfig(
        provider=cast(Provider, provider),
        url=url,
        api_key_env=key_env,
        api_key=key,
        max_results=_int(values.get("max_results", 10), f"{where} max_results", 1, 50),
        max_uses=None if max_uses is None else _int(max_uses, f"{where} max_uses", 1, 1000),
        timeout_seconds=_seconds(values.get("timeout_seconds", 15.0), where),
    )


def _url(value: object, provider: str, where: str) -> str:
    if value is None or value == "":
        if provider == "searxng":
            raise ValueError(
                f"{where} url: required for provider 'searxng' (the instance's base URL, "
                "e.g. https://searx.example.org)"
            )
        return DEFAULT_URLS[provider]
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"{where} url: must be an http:// or https:// URL")
    return value.rstrip("/")


def _api_key(
    name: object, provider: str, env: Mapping[str, str], where: str
) -> tuple[str | None, str | None]:
    if name is None or name == "":
        if provider == "searxng":
            return None, None  # most instances take no key; one behind a proxy may
        raise ValueError(f"{where} api_key_env: required for provider {provider!r}")
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        # The value is not echoed: it may be a key pasted where its variable's name belongs.
        raise ValueError(
            f"{where} api_key_env: must be the NAME of an environment variable "
            "(letters, digits, underscores), not the key itself"
        )
    key = env.get(name)
    if not key:
        raise ValueError(f"{where} api_key_env: environment variable {name} is not set")
    return name, key


def _int(value: object, name: str, low: int, high: int) -> int:
    try:
        number = int(str(value)) if not isinstance(value, bool) else None
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise ValueError(f"{name}: must be an integer from {low} to {high}, got {value!r}")
    return number


def _seconds(value: object, where: str) -> float:
    try:
        number = float(str(value)) if not isinstance(value, bool) else 0.0
    except ValueError:
        number = 0.0
    if not 0 < number <= 300:
        raise ValueError(f"{where} timeout_seconds: must be a number from 0 to 300, got {value!r}")
    return number
