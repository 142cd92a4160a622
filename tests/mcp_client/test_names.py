"""The `mcp__<server>__<tool>` naming scheme: valid, bounded, stable and collision-free."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.errors import BadRequest
from corral.tools.mcp_names import MAX_NAME, is_mcp_name, mcp_tool_name
from corral.tools.resolve import resolve_tools
from corral.wire.agents import BUILTIN_TOOL_NAMES, CustomTool

VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_plain_names_read_as_they_are() -> None:
    assert mcp_tool_name("calc", "add") == "mcp__calc__add"
    assert mcp_tool_name("my-server_1", "get_user") == "mcp__my-server_1__get_user"


@pytest.mark.parametrize(
    ("server", "tool"),
    [
        ("calc", "dotted.name"),  # character the model APIs refuse
        ("a__b", "c"),  # `__` in the server part would make the split ambiguous
        ("_a", "b"),
        ("a_", "b"),
        ("x" * 40, "y" * 40),  # too long
        ("ünïcode", "tøøl"),
    ],
)
def test_other_names_are_sanitised_with_a_digest(server: str, tool: str) -> None:
    name = mcp_tool_name(server, tool)
    assert VALID.match(name) and name.startswith("mcp__")
    assert re.search(r"_[0-9a-f]{8}$", name)
    assert mcp_tool_name(server, tool) == name  # a pure function of the pair


def test_ambiguous_splits_get_different_names() -> None:
    assert mcp_tool_name("a__b", "c") != mcp_tool_name("a", "b__c")
    assert mcp_tool_name("a_", "_b") != mcp_tool_name("a", "__b")
    assert mcp_tool_name("calc", "a.b") != mcp_tool_name("calc", "a_b")


@given(
    st.text(min_size=1, max_size=80),
    st.text(min_size=1, max_size=140),
    st.text(min_size=1, max_size=80),
    st.text(min_size=1, max_size=140),
)
def test_valid_bounded_and_injective(s1: str, t1: str, s2: str, t2: str) -> None:
    first, second = mcp_tool_name(s1, t1), mcp_tool_name(s2, t2)
    assert VALID.match(first) and len(first) <= MAX_NAME
    assert is_mcp_name(first)
    if (s1, t1) != (s2, t2):
        assert first != second


def test_no_builtin_is_in_the_mcp_namespace() -> None:
    assert not any(is_mcp_name(name) for name in BUILTIN_TOOL_NAMES)


def test_custom_tools_may_not_take_the_prefix() -> None:
    tool = CustomTool(
        type="custom", name="mcp__calc__add", description="d", input_schema={"type": "object"}
    )
    with pytest.raises(BadRequest, match="reserved for MCP tools"):
        resolve_tools([tool], [])
