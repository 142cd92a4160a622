"""The built-in tool definitions match the SDK's input types for agent_toolset_20260401, and
which of them a resolved toolset enables."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from anthropic.types import beta

from corral.errors import BadRequest
from corral.tools.builtin import BUILTIN_TOOLS, SANDBOX_TOOLS
from corral.tools.resolve import enabled_builtins, resolve_tools
from corral.wire.agents import AgentToolset

SDK_INPUTS = {
    "bash": beta.BetaManagedAgentsAgentToolset20260401BashInput,
    "read": beta.BetaManagedAgentsAgentToolset20260401ReadInput,
    "write": beta.BetaManagedAgentsAgentToolset20260401WriteInput,
    "edit": beta.BetaManagedAgentsAgentToolset20260401EditInput,
    "glob": beta.BetaManagedAgentsAgentToolset20260401GlobInput,
    "grep": beta.BetaManagedAgentsAgentToolset20260401GrepInput,
}


def test_names() -> None:
    assert set(SANDBOX_TOOLS) == {*SDK_INPUTS, "web_fetch"}
    assert set(BUILTIN_TOOLS) == {*SANDBOX_TOOLS, "web_search"}  # served by a provider
    assert all(spec.name == name for name, spec in BUILTIN_TOOLS.items())


def test_web_fetch_schema() -> None:
    """The SDK leaves web_fetch's input untyped; the tool config's names are the reference."""
    schema = BUILTIN_TOOLS["web_fetch"].input_schema
    assert schema["required"] == ["url"]
    assert {k: v["type"] for k, v in schema["properties"].items()} == {
        "url": "string",
        "max_content_tokens": "integer",
    }


def resolved(configs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    toolset = AgentToolset.model_validate({"type": "agent_toolset_20260401", "configs": configs})
    return enabled_builtins(resolve_tools([toolset], []))


def test_web_fetch_is_served_and_enabled_by_default_but_web_search_is_not() -> None:
    assert set(resolved([])) == {*SDK_INPUTS, "web_fetch"}
    assert "web_fetch" not in resolved([{"name": "web_fetch", "enabled": False}])
    with pytest.raises(BadRequest, match="'web_search' is not available"):
        resolved([{"name": "web_search", "enabled": True}])


def test_web_fetch_config_extras_are_checked() -> None:
    config = resolved([{"name": "web_fetch", "allowed_domains": ["a.example"]}])["web_fetch"]
    assert config["allowed_domains"] == ["a.example"]
    bad: dict[str, Any]
    for bad in (
        {"allowed_domains": ["a.example"], "blocked_domains": ["b.example"]},
        {"blocked_domains": []},
        {"allowed_domains": "a.example"},
        {"max_content_tokens": 0},
        {"max_content_tokens": True},
    ):
        with pytest.raises(BadRequest, match="web_fetch"):
            resolved([{"name": "web_fetch", **bad}])


@pytest.mark.parametrize("name", sorted(SDK_INPUTS))
def test_input_schema_matches_the_sdk(name: str) -> None:
    schema = BUILTIN_TOOLS[name].input_schema
    sdk_fields = SDK_INPUTS[name].model_fields
    assert schema["type"] == "object"
    assert set(schema["properties"]) == set(sdk_fields)
    assert set(schema["required"]) == {f for f, info in sdk_fields.items() if info.is_required()}
    json_types = {str: "string", bool: "boolean", int: "integer", list: "array"}
    for field, info in sdk_fields.items():
        args = [a for a in typing.get_args(info.annotation) if a is not type(None)]
        base = args[0] if args else info.annotation
        expected = json_types[typing.get_origin(base) or base]
        assert schema["properties"][field]["type"] == expected, field


def test_api_form() -> None:
    api = BUILTIN_TOOLS["read"].to_api()
    assert set(api) == {"name", "description", "input_schema"} and api["name"] == "read"
    assert all(len(spec.description) > 20 for spec in BUILTIN_TOOLS.values())
