"""Routes an agent's `model` name to a provider client, from the `[models]` table of corral.toml.

Keys are looked up by environment variable NAME in the mapping passed in: this module never
reads `os.environ`, and configuration never holds a key itself.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Mapping

from corral.context_window import ContextPolicy, policy_for
from corral.model_routes import DEFAULT_ROUTES, ModelRoute, Provider, parse_routes
from corral.models.anthropic import AnthropicClient
from corral.models.base import ModelClient
from corral.pricing import Price, default_price

__all__ = [
    "DEFAULT_ROUTES",
    "ModelRoute",
    "ModelRouter",
    "Provider",
    "UnknownModel",
    "parse_routes",
]


class UnknownModel(ValueError):
    """No route serves this model name (or its provider is not available)."""


class ModelRouter:
    """Hands out one cached client per route; user routes are tried before `DEFAULT_ROUTES`."""

    def __init__(
        self,
        routes: list[ModelRoute],
        env: Mapping[str, str],
        scripted_factory: Callable[[], ModelClient] | None = None,
        *,
        stall_timeout: float = 120.0,
    ) -> None:
        """Create the router.

        Args:
            routes: the configured routes, in priority order.
            env: the server's environment, where `api_key_env` names and ANTHROPIC_API_KEY /
                ANTHROPIC_BASE_URL are looked up.
            scripted_factory: builds the client for the `scripted` provider.
            stall_timeout: seconds a provider may stay silent before its call is given up
                (`model_stall_timeout_seconds`).
        """
        self._routes = (*routes, *DEFAULT_ROUTES)
        self._env = dict(env)
        self._scripted_factory = scripted_factory
        self._stall_timeout = stall_timeout
        self._clients: dict[int, ModelClient] = {}
        for route in routes:
            summariser = route.context.get("compaction_model")
            if summariser is not None:
                try:
                    self._index_for(summariser)
                except UnknownModel:
                    raise ValueError(
                        f"model route {route.match!r}: compaction_model {summariser!r} matches "
                        "no model route"
                    ) from None

    def route_for(self, model: str) -> ModelRoute:
        """The first route matching `model`.

        Raises:
            UnknownModel: no route matches.
        """
        return self._routes[self._index_for(model)]

    def price_for(self, model: str) -> Price | None:
        """The list price of `model`: its route's `price`, else the built-in one, else None
        (a model nobody priced: its cost is not tracked and sessions on it take no budget)."""
        try:
            route = self.route_for(model)
        except UnknownModel:
            return None
        return route.price or default_price(model)

    def context_for(self, model: str) -> ContextPolicy | None:
        """How `model`'s context is managed: its route's `context_window` (else the built-in
        window of a known Claude model) and compaction settings; None: never compacted."""
        try:
            route = self.route_for(model)
        except UnknownModel:
            return None
        return policy_for(model, route.context)

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
            # imported here: the openai SDK costs each server process CPU at import, and
            # most deployments have no such route
            from corral.models.openai_compat import OpenAICompatClient

            key = self._env.get(route.api_key_env) if route.api_key_env else None
            return OpenAICompatClient(
                route.base_url or "",
                key or None,
                upstream_model=route.model,
                timeout=self._stall_timeout,
                api_key_name=route.api_key_env,
            )
        key_name = route.api_key_env or "ANTHROPIC_API_KEY"
        return AnthropicClient(
            self._env.get(key_name) or None,
            route.base_url or self._env.get("ANTHROPIC_BASE_URL") or None,
            upstream_model=route.model,
            timeout=self._stall_timeout,
            api_key_name=key_name,
            env=self._env,
        )
