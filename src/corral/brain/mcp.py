"""MCP toolsets in the brain: which MCP tools a model request offers, and their events (the
actions on a run are in `mcp_calls.py`).

Discovery. Before a model call, each of the agent's MCP servers is asked `tools/list` (through
`corral.mcp.client`, with the session's vault credential); the result is cached per session in
this process and kept until a connection to that server fails; a failed server is not tried
again in that turn, and the next turn lists it again (a new worker, or a restart, lists again
too). A server that cannot be listed is reported
once per turn as `session.error` (`mcp_connection_failed_error` /
`mcp_authentication_failed_error`, naming it), the model is told in its system prompt that the
server's tools are unavailable, and the turn goes on without them.

Names. Tools are offered as `mcp__<server>__<tool>` (`corral.tools.mcp_names`), enabled and
permitted per the agent's resolved `mcp_toolset` (`configs` entry, else `default_config`;
`always_ask` is the default for MCP toolsets). A call is logged as `agent.mcp_tool_use` with
the server's own tool name and `mcp_server_name`.

Networking. `limited` environments reach an MCP server only with `allow_mcp_servers: true` or
its host in `allowed_hosts`; the operator's address rules apply on top (`corral.outbound`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import anyio

from corral.brain import events as ev
from corral.mcp.client import CallOutcome, McpClient, McpFailure, McpTool, ServerRef
from corral.models.base import ModelRequest
from corral.observability.tracing import span
from corral.tools.mcp_names import mcp_tool_name
from corral.tools.resolve import mcp_tool_config, mcp_toolsets

log = logging.getLogger("corral.mcp")
_SESSIONS = 256


@dataclass(slots=True)
class Offer:
    """What one model request offers from MCP servers."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    by_name: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Model-facing name -> (server name, the server's tool name)."""
    errors: list[dict[str, Any]] = field(default_factory=list)
    """`session.error` events to log with the request."""
    notes: list[str] = field(default_factory=list)
    """Lines for the system prompt about servers whose tools are unavailable."""

    def extend(self, request: ModelRequest) -> ModelRequest:
        """`request` with the MCP tools (and notes) added."""
        if not self.tools and not self.notes:
            return request
        system = request.system
        if self.notes:
            section = "<mcp-servers>\n" + "\n".join(self.notes) + "\n</mcp-servers>"
            system = f"{system}\n\n{section}" if system else section
        return replace(request, tools=[*request.tools, *self.tools], system=system)


@dataclass(frozen=True, slots=True)
class SessionView:
    """What MCP needs of a session: its agent, vaults, networking and current turn."""

    session_id: str
    agent: dict[str, Any]
    vault_ids: tuple[str, ...]
    networking: dict[str, Any]
    turn: int
    """Seq of the last turn close: failures are reported once per turn."""


class McpToolsets:
    """Per-process MCP state of the brains: tool lists per session, reported failures."""

    def __init__(self, client: McpClient) -> None:
        self.client = client
        self._tools: OrderedDict[str, dict[str, list[McpTool]]] = OrderedDict()
        self._failed: dict[tuple[str, str], tuple[int, McpFailure]] = {}
        """(session, server) -> (turn, failure): a server that failed is not tried again in
        that turn (a silent one would cost its timeout on every step)."""

    async def offer(self, view: SessionView) -> Offer:
        """The MCP tools to offer now, listing servers not in the cache (concurrently)."""
        offer = Offer()
        servers = _servers(view.agent)
        if not servers:
            return offer
        toolsets = mcp_toolsets(view.agent.get("tools") or [])
        listed: dict[str, list[McpTool] | McpFailure] = {}

        async def one(server: ServerRef) -> None:
            listed[server.name] = await self._listed(view, server)

        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(one, server)
        for server in servers:
            result = listed[server.name]
            if isinstance(result, McpFailure):
                self._report(view, result, offer)
                continue
            _add_tools(offer, server.name, toolsets.get(server.name) or {}, result)
        return offer

    async def call(
        self, view: SessionView, server_name: str, tool: str, arguments: dict[str, Any]
    ) -> CallOutcome | McpFailure:
        """Run one tool call; a failure drops the server's cached tool list."""
        server = next((s for s in _servers(view.agent) if s.name == server_name), None)
        if server is None:
            text = f"MCP server '{server_name}' is not configured for this agent."
            return CallOutcome(ev.text_content(text), is_error=True)
        refusal = networking_refusal(view.networking, server)
        if refusal is not None:
            return refusal
        try:
            with span("corral.mcp_call", view.session_id, **{"corral.mcp.server": server.name}):
                return await self.client.call_tool(server, view.vault_ids, tool, arguments)
        except McpFailure as failure:
            # Listed again in the next turn; this turn has its error already.
            self._forget(view.session_id, server.name)
            self._remember(view, failure)
            log.warning("session %s: %s", view.session_id, failure.message)
            return failure

    async def _listed(self, view: SessionView, server: ServerRef) -> list[McpTool] | McpFailure:
        cached = self._tools.get(view.session_id, {}).get(server.name)
        if cached is not None:
            self._tools.move_to_end(view.session_id)
            return cached
        failed = self._failed.get((view.session_id, server.name))
        if failed is not None and failed[0] == view.turn:
            return failed[1]
        refusal = networking_refusal(view.networking, server)
        if refusal is not None:
            return refusal
        try:
            with span(
                "corral.mcp_list_tools", view.session_id, **{"corral.mcp.server": server.name}
            ):
                tools = await self.client.list_tools(server, view.vault_ids)
        except McpFailure as failure:
            return failure
        self._tools.setdefault(view.session_id, {})[server.name] = tools
        self._tools.move_to_end(view.session_id)
        while len(self._tools) > _SESSIONS:
            self._tools.popitem(last=False)
        return tools

    def _report(self, view: SessionView, failure: McpFailure, offer: Offer) -> None:
        offer.notes.append(
            f"The tools of MCP server '{failure.server}' are unavailable in this turn: "
            f"{failure.message}"
        )
        failed = self._failed.get((view.session_id, failure.server))
        if failed is not None and failed[0] == view.turn:
            return  # already reported in this turn
        self._remember(view, failure)
        log.warning("session %s: %s", view.session_id, failure.message)
        offer.errors.append(failure_event(failure, "retrying"))

    def _remember(self, view: SessionView, failure: McpFailure) -> None:
        if len(self._failed) >= 4 * _SESSIONS:
            self._failed.clear()  # at worst a failure is reported (and tried) once more
        self._failed[(view.session_id, failure.server)] = (view.turn, failure)

    def _forget(self, session_id: str, server: str) -> None:
        self._tools.get(session_id, {}).pop(server, None)


def failure_event(failure: McpFailure, retry: str) -> dict[str, Any]:
    """The `session.error` for a failed MCP server (`retry`: "retrying" when Corral will
    connect again by itself, on the next turn; "exhausted" for a call it will not repeat)."""
    return ev.session_error(
        failure.error_type,
        failure.message,
        "retrying" if retry == "retrying" else "exhausted",
        mcp_server_name=failure.server,
    )


def mcp_use_event(
    by_name: dict[str, tuple[str, str]], agent: dict[str, Any], name: str, tool_input: Any
) -> dict[str, Any] | None:
    """`agent.mcp_tool_use` for a model call of an offered MCP tool, else None."""
    target = by_name.get(name)
    if target is None:
        return None
    server, tool = target
    toolset = mcp_toolsets(agent.get("tools") or []).get(server) or {}
    _, policy = mcp_tool_config(toolset, tool)
    return ev.event(
        "agent.mcp_tool_use",
        mcp_server_name=server,
        name=tool,
        input=dict(tool_input or {}),
        evaluated_permission="allow" if policy == "always_allow" else "ask",
        evaluation={"type": policy},
    )


def networking_refusal(networking: dict[str, Any], server: ServerRef) -> McpFailure | None:
    """A failure when the session's environment networking does not allow the server."""
    if networking.get("type", "unrestricted") == "unrestricted":
        return None
    parts = urlsplit(server.url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if networking.get("allow_mcp_servers") or _host_listed(
        host, port, networking.get("allowed_hosts") or []
    ):
        return None
    return McpFailure(
        "connection",
        server.name,
        f"MCP server '{server.name}' ({server.url}) is not reachable from this session: its "
        f"environment's networking is limited, without allow_mcp_servers and without "
        f"'{host}' in allowed_hosts",
    )


def _host_listed(host: str, port: int, allowed: list[str]) -> bool:
    for entry in allowed:
        rule = entry.strip().lower()
        name, _, rule_port = rule.partition(":")
        if rule_port and rule_port != str(port):
            continue
        if name == host or (name.startswith("*.") and host.endswith(name[1:])):
            return True
    return False


def _servers(agent: dict[str, Any]) -> list[ServerRef]:
    return [ServerRef(str(s["name"]), str(s["url"])) for s in agent.get("mcp_servers") or []]


def _add_tools(offer: Offer, server: str, toolset: dict[str, Any], tools: list[McpTool]) -> None:
    for tool in tools:
        enabled, _ = mcp_tool_config(toolset, tool.name)
        name = mcp_tool_name(server, tool.name)
        if not enabled or name in offer.by_name:
            continue  # disabled, or (vanishingly unlikely) a digest clash: the first one wins
        offer.by_name[name] = (server, tool.name)
        description = tool.description or f"Tool '{tool.name}' of MCP server '{server}'."
        offer.tools.append(
            {"name": name, "description": description, "input_schema": tool.input_schema}
        )
