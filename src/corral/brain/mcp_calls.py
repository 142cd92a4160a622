"""The brain's MCP actions on a run: which tools to offer a turn, and running one call
(`brain/mcp.py` holds the toolsets, their cache and the pure event helpers)."""

from __future__ import annotations

from typing import Any

from corral.brain import events as ev
from corral.brain.mcp import Offer, SessionView, failure_event
from corral.brain.run import Run
from corral.brain.state import ToolCall
from corral.mcp.client import CallOutcome, McpFailure


async def session_view(run: Run) -> SessionView:
    """The session as MCP needs it (the environment read now: networking may change)."""
    env = await run.deps.store.get_resource("environment", run.session.environment_id)
    # Fail closed: a deleted environment's networking is unknown, so it reaches no server.
    networking = (env.body.get("config") or {}).get("networking") if env else None
    return SessionView(
        session_id=run.fence.session_id,
        agent=run.agent,
        vault_ids=tuple(run.session.body.get("vault_ids") or ()),
        networking=(networking or {"type": "unrestricted"}) if env else {"type": "limited"},
        turn=run.state.last_close_seq,
    )


async def offer_for(run: Run, since: int) -> Offer | None:
    """The MCP part of the next request; None if an interrupt came while servers were listed."""
    toolsets = run.deps.mcp
    if toolsets is None or not run.agent.get("mcp_servers"):
        return Offer()
    view = await session_view(run)
    offer, interrupted = await run.until_interrupt(lambda: toolsets.offer(view), after=since)
    return None if interrupted or offer is None else offer


async def run_mcp_tool(run: Run, call: ToolCall, running: list[dict[str, Any]]) -> None:
    """Log the start, call the MCP server, log `agent.mcp_tool_result` (and a `session.error`
    naming the server if it could not be used). Like built-in tools, the start marker is
    durable before the call, so a crash mid-call is reported, never re-run."""
    since = run.state.last_seq
    toolsets = run.deps.mcp
    if toolsets is None:
        text = ev.text_content("MCP toolsets are not available on this server.")
        await run.append(*running, ev.mcp_tool_result(call.event_id, text, is_error=True))
        return
    view = await session_view(run)
    await run.append(*running, ev.tool_started(call.event_id))

    async def work() -> CallOutcome | McpFailure:
        return await toolsets.call(view, call.server, call.name, call.input)

    outcome, _ = await run.until_interrupt(work, after=since)
    if outcome is None:
        text = ev.text_content("Interrupted by the user before the tool finished.")
        await run.append(ev.mcp_tool_result(call.event_id, text, is_error=True))
    elif isinstance(outcome, McpFailure):
        text = ev.text_content(f"The tool call failed: {outcome.message}")
        await run.append(
            failure_event(outcome, "exhausted"),
            ev.mcp_tool_result(call.event_id, text, is_error=True),
        )
    else:
        result = ev.mcp_tool_result(call.event_id, outcome.content, is_error=outcome.is_error)
        await run.append(result)
