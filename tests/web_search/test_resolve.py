"""Resolving `web_search` in an agent's toolset: refused without a provider (naming the
setting), served and enabled by default with one, its config extras checked."""

from __future__ import annotations

from typing import Any

import pytest

from corral.errors import BadRequest
from corral.tools.resolve import enabled_builtins, resolve_tools
from corral.wire.agents import AgentToolset


def resolved(
    configs: list[dict[str, Any]], providers: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    toolset = AgentToolset.model_validate({"type": "agent_toolset_20260401", "configs": configs})
    return enabled_builtins(resolve_tools([toolset], [], providers))


def test_without_a_provider_enabling_it_names_the_setting() -> None:
    with pytest.raises(BadRequest, match=r"'web_search' .*\[web_search\] provider") as info:
        resolved([{"name": "web_search", "enabled": True}], ())
    assert info.value.error_code == "tool_not_available"
    assert "web_search" not in resolved([], ())


def test_with_a_provider_it_is_enabled_by_default_and_can_be_disabled() -> None:
    assert "web_search" in resolved([], ("web_search",))
    assert "web_search" not in resolved([{"name": "web_search", "enabled": False}], ("web_search",))


def test_unknown_provider_names_do_not_make_other_tools_servable() -> None:
    assert "web_search" not in resolved([], ("bash", "web_searchx"))


def test_config_extras_are_kept() -> None:
    config = resolved(
        [
            {
                "name": "web_search",
                "allowed_domains": ["docs.example.com", "example.org/blog"],
                "max_uses": 2,
                "user_location": {"type": "approximate", "country": "DE", "city": "Berlin"},
            }
        ],
        ("web_search",),
    )["web_search"]
    assert config["allowed_domains"] == ["docs.example.com", "example.org/blog"]
    assert config["max_uses"] == 2 and config["user_location"]["country"] == "DE"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"allowed_domains": ["a.example"], "blocked_domains": ["b.example"]}, "mutually"),
        ({"blocked_domains": []}, "blocked_domains"),
        ({"allowed_domains": "a.example"}, "allowed_domains"),
        ({"max_uses": 0}, "max_uses"),
        ({"max_uses": "3"}, "max_uses"),
        ({"user_location": {"type": "exact"}}, "user_location"),
        ({"user_location": {"type": "approximate", "planet": "Mars"}}, "user_location"),
    ],
)
def test_bad_extras_are_refused(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        resolved([{"name": "web_search", **extra}], ("web_search",))
