"""Routes an agent's `model` name to a provider client, from the `[models]` table of corral.toml.

Keys are looked up by environment variable NAME in the mapping passed in: this module never
reads `os.environ`, and configuration never holds a key itself.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

from corral.models.anthropic import AnthropicClient
from corral.models.base import ModelClient
from corral.models.openai_compat import OpenAICompatClient

Provider = Literal["anthropic", "openai", "scripted"]
_PROVIDERS: tuple[str, ...] = get_args(Provider)
_ROUTE_KEYS = ("match", "provider", "base_url", "api_key_env", "model")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class UnknownModel(ValueError):
    """No route serves this model name (or its provider is not available)."""


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
    return [_parse_route(i + 1, entry) for i, entry in enumerate(entries)]


def _parse_route(number: int, entry: Any) -> ModelRoute:
    where = f"[[models.routes]] entry {number}"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where}: must be a table")
    unknown = sorted(set(entry) - set(_ROUTE_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {list(_ROUTE_KEYS)}")
    fields = {key: _optional_str(where, key, entry.get(key)) for key in _ROUTE_KEYS}
    if not fields["match"]:
        raise ValueError(f"{where}: 'match' is required (an fnmatch pattern such as 'claude-*')")
    provider = fields["provider"]
    if provider not in _PROVIDERS:
        raise ValueError(f"{where}: 'provider' must be one of {list(_PROVIDERS)}")
    base_url = fields["base_url"]
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ValueError(f"{where}: 'base_url' must start with http:// or https://")
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
    )


def _optional_str(where: str, key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {key!r} must be a non-empty string")
    return value


class ModelRouter:
    """Hands out one cached client per route; user routes are tried before `DEFAULT_ROUTES`."""

    def __init__(
        self,
        routes: list[ModelRoute],
        env: Mapping[str, str],
        scripted_factory: Callable[[], ModelClient] | None = None,
    ) -> None:
        """Create the router.

        Args:
            routes: the configured routes, in priority order.
            env: the server's environment, where `api_key_env` names and ANTHROPIC_API_KEY /
                ANTHROPIC_BASE_URL are looked up.
            scripted_factory: builds the client for the `scripted` provider.
        """
        self._routes = (*routes, *DEFAULT_ROUTES)
        self._env = dict(env)
        self._scripted_factory = scripted_factory
        self._clients: dict[int, ModelClient] = {}

    def route_for(self, model: str) -> ModelRoute:
        """The first route matching `model`.

        Raises:
            UnknownModel: no route matches.
        """
        return self._routes[self._index_for(model)]

    def client_for(self, model: str) -> ModelClient:
        """The client serving `model`, built on first use and cached per route.

        Raises:
            UnknownModel: no route matches, or it is `scripted` and no factory was given.
        """
        index = self._index_for(model)
        client = self._clients.get(index)
        if client is None:
            client = self._clients[index] = self._build(self._routes[index], model)
        return client

    async def aclose(self) -> None:
        """Close every client built so far."""
        clients = list(self._clients.values())
        self._clients.clear()
        for client in clients:
            await client.aclose()

    def _index_for(self, model: str) -> int:
        for index, route in enumerate(self._routes):
            if fnmatch.fnmatchcase(model, route.match):
                return index
        patterns = [route.match for route in self._routes]
        raise UnknownModel(f"no model route matches {model!r} (routes: {patterns})")

    def _build(self, route: ModelRoute, model: str) -> ModelClient:
        if route.provider == "scripted":
            if self._scripted_factory is None:
                raise UnknownModel(f"model {model!r} routes to the scripted provider, not enabled")
            return self._scripted_factory()
        if route.provider == "openai":
            key = self._env.get(route.api_key_env) if route.api_key_env else None
            return OpenAICompatClient(
                route.base_url or "",
                key or None,
                upstream_model=route.model,
                api_key_name=route.api_key_env,
            )
        key_name = route.api_key_env or "ANTHROPIC_API_KEY"
        return AnthropicClient(
            self._env.get(key_name) or None,
            route.base_url or self._env.get("ANTHROPIC_BASE_URL") or None,
            upstream_model=route.model,
            api_key_name=key_name,
        )
