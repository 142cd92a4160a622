"""Resolve agent `tools` requests into the concrete wire form and check they can be served.

Pure functions over wire models; no I/O.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from corral.errors import BadRequest
from corral.tools.mcp_names import MCP_PREFIX, is_mcp_name
from corral.wire.agents import (
    BUILTIN_TOOL_NAMES,
    AgentToolset,
    CustomTool,
    McpServer,
    McpToolset,
)

DEFAULT_POLICY = {"type": "always_allow"}
SERVABLE_BUILTINS = frozenset({"bash", "read", "write", "edit", "glob", "grep", "web_fetch"})
"""Built-in tools this build can execute; others are refused when explicitly enabled."""
PROVIDER_BUILTINS = {"web_search": "[web_search] provider"}
"""Built-ins served only when the operator configures a provider, and the setting to name."""


def resolve_tools(
    tools: list[AgentToolset | McpToolset | CustomTool],
    mcp_servers: list[McpServer],
    providers: Collection[str] = (),
) -> list[dict[str, Any]]:
    """Concrete tool entries for an agent; raises BadRequest naming the offending field.

    `providers`: the `PROVIDER_BUILTINS` this server has a provider for (servable, and
    enabled by default like the others)."""
    _check_names(tools, mcp_servers)
    servable = SERVABLE_BUILTINS | (set(providers) & set(PROVIDER_BUILTINS))
    resolved: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        if isinstance(tool, AgentToolset):
            resolved.append(_resolve_toolset(tool, index, servable))
        elif isinstance(tool, McpToolset):
            resolved.append(_resolve_mcp(tool))
        else:
            resolved.append(tool.model_dump(exclude_none=True))
    return resolved


def _policy(value: Any, fallback: dict[str, Any]) -> dict[str, Any]:
    return dict(value.model_dump()) if value is not None else dict(fallback)


def _resolve_toolset(tool: AgentToolset, index: int, servable: frozenset[str]) -> dict[str, Any]:
    default = tool.default_config
    default_enabled = True if default is None or default.enabled is None else default.enabled
    default_policy = _policy(default.permission_policy if default else None, DEFAULT_POLICY)
    overrides: dict[str, Any] = {c.name: c for c in tool.configs or []}
    configs = []
    for name in BUILTIN_TOOL_NAMES:
        override = overrides.get(name)
        explicit = override.enabled if override is not None else None
        enabled = explicit if explicit is not None else default_enabled
        if name not in servable and explicit is not True:
            enabled = False
        if enabled and name not in servable:
            raise BadRequest(
                f"tools[{index}].configs: '{name}' is not available on this server "
                f"({_missing_setting(name)}); disable it or remove it",
                error_code="tool_not_available",
            )
        entry: dict[str, Any] = {"name": name, "type": name, "enabled": enabled}
        entry["permission_policy"] = _policy(
            override.permission_policy if override else None, default_policy
        )
        if override is not None and override.model_extra:
            entry.update(override.model_extra)
            if name == "web_fetch":
                _check_web_fetch(entry, index)
            elif name == "web_search":
                _check_web_search(entry, index)
        configs.append(entry)
    return {
        "type": tool.type,
        "default_config": {"enabled": default_enabled, "permission_policy": default_policy},
        "configs": configs,
    }


def _missing_setting(name: str) -> str:
    setting = PROVIDER_BUILTINS.get(name)
    if setting is None:
        return "no provider configured"
    return f"no provider configured: the operator sets {setting} in corral.toml"


def _check_web_search(entry: dict[str, Any], index: int) -> None:
    """The config extras web_search honours: domain lists, a location hint, and `max_uses`
    (searches per turn; a Corral extension, as on the Messages API's web search tool)."""
    where = f"tools[{index}].configs[web_search]"
    _check_domains(entry, where)
    uses = entry.get("max_uses")
    if uses is not None and (type(uses) is not int or not 0 < uses <= 1000):
        raise BadRequest(f"{where}.max_uses: must be an integer from 1 to 1000, or null")
    location = entry.get("user_location")
    if location is not None and (
        not isinstance(location, dict)
        or location.get("type") != "approximate"
        or not all(isinstance(v, str) for k, v in location.items() if v is not None)
        or set(location) - {"type", "city", "region", "country", "timezone"}
    ):
        raise BadRequest(
            f"{where}.user_location: must be {{type: 'approximate', city?, region?, "
            "country?, timezone?}} with string values"
        )


def _check_web_fetch(entry: dict[str, Any], index: int) -> None:
    """The config extras web_fetch honours: domain lists and a content cap."""
    where = f"tools[{index}].configs[web_fetch]"
    _check_domains(entry, where)
    tokens = entry.get("max_content_tokens")
    if tokens is not None and (type(tokens) is not int or tokens < 1):
        raise BadRequest(f"{where}.max_content_tokens: must be a positive integer or null")


def _check_domains(entry: dict[str, Any], where: str) -> None:
    lists = [k for k in ("allowed_domains", "blocked_domains") if entry.get(k) is not None]
    if len(lists) == 2:
        raise BadRequest(f"{where}: allowed_domains and blocked_domains are mutually exclusive")
    for key in lists:
        value = entry[key]
        if (
            not isinstance(value, list)
            or not 0 < len(value) <= 64
            or not all(isinstance(v, str) and v.strip() for v in value)
        ):
            raise BadRequest(f"{where}.{key}: must be a list of 1 to 64 non-empty hostnames")


def _resolve_mcp(tool: McpToolset) -> dict[str, Any]:
    default = tool.default_config
    enabled = True if default is None or default.enabled is None else default.enabled
    policy = _policy(default.permission_policy if default else None, {"type": "always_ask"})
    return {
        "type": "mcp_toolset",
        "mcp_server_name": tool.mcp_server_name,
        "default_config": {"enabled": enabled, "permission_policy": policy},
        "configs": [
            {
                "name": c.name,
                "enabled": enabled if c.enabled is None else c.enabled,
                "permission_policy": _policy(c.permission_policy, policy),
            }
            for c in tool.configs or []
        ],
    }


def _check_names(
    tools: list[AgentToolset | McpToolset | CustomTool], mcp_servers: list[McpServer]
) -> None:
    if sum(isinstance(t, AgentToolset) for t in tools) > 1:
        raise BadRequest("tools: agent_toolset_20260401 may appear once")
    server_names = [s.name for s in mcp_servers]
    if len(server_names) != len(set(server_names)):
        raise BadRequest("mcp_servers: names must be unique")
    referenced = {t.mcp_server_name for t in tools if isinstance(t, McpToolset)}
    for name in referenced - set(server_names):
        raise BadRequest(f"tools: mcp_toolset references unknown mcp server '{name}'")
    for name in set(server_names) - referenced:
        raise BadRequest(f"mcp_servers: '{name}' is not referenced by any mcp_toolset")
    builtin = set(BUILTIN_TOOL_NAMES) if any(isinstance(t, AgentToolset) for t in tools) else set()
    seen: set[str] = set()
    for tool in tools:
        if isinstance(tool, CustomTool):
            if is_mcp_name(tool.name):
                raise BadRequest(
                    f"tools: custom tool name '{tool.name}' may not start with '{MCP_PREFIX}' "
                    "(reserved for MCP tools, see docs/mcp.md)",
                    error_code="tool_name_conflict",
                )
            if tool.name in seen or tool.name in builtin:
                raise BadRequest(
                    f"tools: tool name '{tool.name}' is used twice", error_code="tool_name_conflict"
                )
            seen.add(tool.name)


def enabled_builtins(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Name -> resolved config of every enabled built-in tool of a resolved tool list."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        if tool.get("type") == "agent_toolset_20260401":
            for config in tool.get("configs", []):
                if config.get("enabled"):
                    out[str(config["name"])] = config
    return out


def custom_tools(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Name -> definition of every custom tool."""
    return {str(t["name"]): t for t in tools if t.get("type") == "custom"}


def mcp_toolsets(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """MCP server name -> its resolved `mcp_toolset` entry."""
    return {str(t["mcp_server_name"]): t for t in tools if t.get("type") == "mcp_toolset"}


def mcp_tool_config(toolset: dict[str, Any], tool: str) -> tuple[bool, str]:
    """(enabled, permission policy type) of one MCP tool under its resolved toolset: its
    `configs` entry if any, else the toolset's `default_config`."""
    default = toolset.get("default_config") or {}
    config = next((c for c in toolset.get("configs") or [] if c.get("name") == tool), default)
    policy = (config.get("permission_policy") or {}).get("type", "always_ask")
    return bool(config.get("enabled", True)), str(policy)
