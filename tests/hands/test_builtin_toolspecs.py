"""The built-in tool definitions match the SDK's input types for agent_toolset_20260401."""

from __future__ import annotations

import typing

import pytest
from anthropic.types import beta

from corral.tools.builtin import BUILTIN_TOOLS, SANDBOX_TOOLS

SDK_INPUTS = {
    "bash": beta.BetaManagedAgentsAgentToolset20260401BashInput,
    "read": beta.BetaManagedAgentsAgentToolset20260401ReadInput,
    "write": beta.BetaManagedAgentsAgentToolset20260401WriteInput,
    "edit": beta.BetaManagedAgentsAgentToolset20260401EditInput,
    "glob": beta.BetaManagedAgentsAgentToolset20260401GlobInput,
    "grep": beta.BetaManagedAgentsAgentToolset20260401GrepInput,
}


def test_names() -> None:
    assert set(BUILTIN_TOOLS) == {*SANDBOX_TOOLS, "web_fetch"}
    assert set(SANDBOX_TOOLS) == set(SDK_INPUTS)
    assert all(spec.name == name for name, spec in BUILTIN_TOOLS.items())
    assert [n for n, s in BUILTIN_TOOLS.items() if s.needs_network] == ["web_fetch"]


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
