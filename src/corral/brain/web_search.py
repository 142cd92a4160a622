"""Running a `web_search` call: on the server, through the operator's provider, never in a
sandbox (none is provisioned for it). Same at-most-once flow as every server-side call: the
start marker is durable before the provider is asked, and a call over the turn's `max_uses`
gets an error result without starting."""

from __future__ import annotations

from typing import Any

from corral.brain import events as ev
from corral.brain.run import Run
from corral.brain.state import ToolCall
from corral.tools.resolve import enabled_builtins
from corral.tools.web_search import SearchOutput, query_problem

TOOL = "web_search"
NO_PROVIDER = (
    "Web search is not available: this server has no web search provider configured "
    "([web_search] provider in corral.toml)."
)
INTERRUPTED = "Interrupted by the user before the search finished."


async def run_web_search(run: Run, call: ToolCall, running: list[dict[str, Any]]) -> None:
    """Log the start, search, log the result (or refuse without starting)."""
    since = run.state.last_seq
    searcher = run.deps.web_search
    if searcher is None:
        await _refuse(run, call, running, NO_PROVIDER)
        return
    config = enabled_builtins(run.agent.get("tools") or []).get(TOOL) or {}
    refusal = _refusal(run, searcher.max_uses(config), call)
    if refusal is not None:
        await _refuse(run, call, running, refusal)
        return
    await run.append(*running, ev.tool_started(call.event_id, server_tool=TOOL))

    async def work() -> SearchOutput:
        return await searcher.run(call.input, config)

    output, _ = await run.until_interrupt(work, after=since)
    if output is None:
        output = SearchOutput(content=ev.text_content(INTERRUPTED), is_error=True)
    await run.append(ev.tool_result(call.event_id, output.content, is_error=output.is_error))


def _refusal(run: Run, limit: int | None, call: ToolCall) -> str | None:
    """Why this call is answered without searching (so it does not count), or None."""
    if limit is not None and run.state.turn_starts.get(TOOL, 0) >= limit:
        return (
            f"max_uses exceeded: this agent may search at most {limit} time(s) per turn. "
            "Answer with what you have found."
        )
    return query_problem(call.input)


async def _refuse(run: Run, call: ToolCall, running: list[dict[str, Any]], text: str) -> None:
    await run.append(*running, ev.tool_result(call.event_id, ev.text_content(text), is_error=True))


class WebSearchTools:
    """`web_search` as a tool family: offered and logged with the agent's toolset (a
    built-in), run here through the operator's provider instead of in a sandbox."""

    def definitions(self, agent: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    def use_event(self, agent: dict[str, Any], name: str, tool_input: Any) -> dict[str, Any] | None:
        return None

    def owns(self, call: ToolCall) -> bool:
        return call.kind == "builtin" and call.name == TOOL

    async def run(self, run: Run, call: ToolCall, running: list[dict[str, Any]]) -> None:
        await run_web_search(run, call, running)
