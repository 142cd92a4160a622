from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral.models.anthropic import AnthropicClient
from corral.models.base import ModelError, ModelRequest, ModelResponse, ModelStreamEvent
from corral.models.openai_compat import OpenAICompatClient
from corral.models.router import (
    DEFAULT_ROUTES,
    ModelRoute,
    ModelRouter,
    UnknownModel,
    parse_routes,
)
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.models.support import drain, make_request

pytestmark = pytest.mark.anyio


class CannedModel:
    """A stand-in for the scripted provider (written elsewhere)."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        yield ModelResponse(content=[{"type": "text", "text": "canned"}], stop_reason="end_turn")

    async def aclose(self) -> None:
        pass


def test_parse_routes_reads_models_table() -> None:
    table = {
        "routes": [
            {"match": "llama-*", "provider": "openai", "base_url": "http://127.0.0.1:11434/v1"},
            {
                "match": "claude-fast",
                "provider": "anthropic",
                "api_key_env": "FAST_KEY",
                "model": "claude-haiku-9",
            },
        ]
    }
    assert parse_routes(table) == [
        ModelRoute(match="llama-*", provider="openai", base_url="http://127.0.0.1:11434/v1"),
        ModelRoute(
            match="claude-fast",
            provider="anthropic",
            api_key_env="FAST_KEY",
            model="claude-haiku-9",
        ),
    ]
    assert parse_routes({}) == []


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"routes": {"match": "x"}}, "array of tables"),
        ({"routes": ["x"]}, "entry 1: must be a table"),
        ({"routes": [{"provider": "anthropic"}]}, "'match' is required"),
        ({"routes": [{"match": "x", "provider": "gemini"}]}, "'provider' must be one of"),
        ({"routes": [{"match": "x", "provider": "openai"}]}, "needs a 'base_url'"),
        (
            {"routes": [{"match": "x", "provider": "anthropic", "base_url": "ftp://h"}]},
            "must be an http:// or https:// URL",
        ),
        (
            {"routes": [{"match": "x", "provider": "anthropic", "base_url": "http://h:99999"}]},
            "must be an http:// or https:// URL",
        ),
        (
            {"routes": [{"match": "x", "provider": "anthropic", "base_url": "https://h/?a=1"}]},
            "takes no query",
        ),
        (
            {"routes": [{"match": "x", "provider": "openai", "base_url": "http://u:p@h/v1"}]},
            "takes no query, fragment or credentials",
        ),
        ({"routes": [{"match": "x", "provider": "anthropic", "key": "k"}]}, "unknown keys"),
        ({"routes": [{"match": 3, "provider": "anthropic"}]}, "'match' must be a non-empty"),
        (
            {"routes": [{"match": "a", "provider": "scripted"}, {"match": "", "provider": "x"}]},
            "entry 2",
        ),
    ],
)
def test_parse_routes_rejects_bad_entries(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_routes(table)


def test_a_key_pasted_into_api_key_env_is_rejected_without_echoing_it() -> None:
    secret = "sk-ant-api03-abcdef"
    table = {"routes": [{"match": "c*", "provider": "anthropic", "api_key_env": secret}]}
    with pytest.raises(ValueError, match="NAME of an environment variable") as caught:
        parse_routes(table)
    assert secret not in str(caught.value)


async def test_defaults_route_claude_and_scripted() -> None:
    canned = CannedModel()
    router = ModelRouter([], {"ANTHROPIC_API_KEY": "k"}, scripted_factory=lambda: canned)
    assert isinstance(router.client_for("claude-sonnet-9"), AnthropicClient)
    assert router.client_for("corral-scripted") is canned
    assert router.client_for("corral-scripted-fast") is canned
    assert router.route_for("claude-x") == DEFAULT_ROUTES[1]
    with pytest.raises(UnknownModel, match="gpt-9"):
        router.client_for("gpt-9")
    await router.aclose()


async def test_user_routes_win_over_defaults_in_order() -> None:
    routes = [
        ModelRoute(match="claude-local*", provider="openai", base_url="http://127.0.0.1:1/v1"),
        ModelRoute(match="claude-*", provider="scripted"),
    ]
    router = ModelRouter(routes, {}, scripted_factory=CannedModel)
    assert isinstance(router.client_for("claude-local-1"), OpenAICompatClient)
    assert isinstance(router.client_for("claude-sonnet-9"), CannedModel)
    await router.aclose()


async def test_clients_are_cached_per_route() -> None:
    router = ModelRouter([], {"ANTHROPIC_API_KEY": "k"})
    first = router.client_for("claude-a")
    assert router.client_for("claude-b") is first
    await router.aclose()
    assert router.client_for("claude-a") is not first, "aclose forgets the closed clients"
    await router.aclose()


def test_scripted_without_factory_is_unknown() -> None:
    with pytest.raises(UnknownModel, match="scripted"):
        ModelRouter([], {}).client_for("corral-scripted")


async def test_anthropic_route_uses_env_key_and_base_url(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns([Turn([Text("via env")])])
    router = ModelRouter([], {"ANTHROPIC_API_KEY": "env-key", "ANTHROPIC_BASE_URL": fake.url})
    try:
        _, final = await drain(router.client_for("claude-test"), make_request())
    finally:
        await router.aclose()
    assert final.content == [{"type": "text", "text": "via env"}]
    assert fake.recorded[0].headers["x-api-key"] == "env-key"


async def test_route_key_name_base_url_and_rename(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns([Turn([Text("a")]), Turn([Text("b")])])
    routes = [
        ModelRoute(
            match="team-claude",
            provider="anthropic",
            base_url=fake.url,
            api_key_env="TEAM_KEY",
            model="claude-upstream-1",
        ),
        ModelRoute(
            match="llama-*",
            provider="openai",
            base_url=fake.openai_url,
            model="llama3.1:8b",
        ),
    ]
    env = {"TEAM_KEY": "team-secret", "ANTHROPIC_API_KEY": "unused"}
    router = ModelRouter(routes, env)
    try:
        await drain(router.client_for("team-claude"), make_request(model="team-claude"))
        await drain(router.client_for("llama-big"), make_request(model="llama-big"))
    finally:
        await router.aclose()
    anthropic_call, openai_call = fake.recorded
    assert anthropic_call.body["model"] == "claude-upstream-1"
    assert anthropic_call.headers["x-api-key"] == "team-secret"
    assert openai_call.path == "/v1/chat/completions"
    assert openai_call.body["model"] == "llama3.1:8b"


@pytest.mark.parametrize(
    ("route", "variable"),
    [
        (None, "ANTHROPIC_API_KEY"),
        (ModelRoute(match="claude-*", provider="anthropic", api_key_env="MY_KEY"), "MY_KEY"),
        (
            ModelRoute(
                match="claude-*",
                provider="openai",
                base_url="http://127.0.0.1:1/v1",
                api_key_env="LOCAL_KEY",
            ),
            "LOCAL_KEY",
        ),
    ],
)
async def test_missing_key_error_names_the_variable(
    route: ModelRoute | None, variable: str
) -> None:
    router = ModelRouter([route] if route else [], {})
    with pytest.raises(ModelError) as caught:
        await drain(router.client_for("claude-test"), make_request())
    await router.aclose()
    assert (caught.value.kind, caught.value.retryable) == ("authentication", False)
    assert variable in caught.value.message
