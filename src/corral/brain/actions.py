"""One function per action kind; each appends before and after its side effect."""

from __future__ import annotations

from typing import Any

import anyio

from corral.brain import events as ev
from corral.brain.context import build_request
from corral.brain.decide import (
    Action,
    CallModel,
    FinishTurn,
    HandleInterrupt,
    RepairDangling,
    RequestAction,
    RunTools,
)
from corral.brain.run import Run
from corral.brain.state import SessionState, ToolCall
from corral.brain.stream import stream_response
from corral.errors import NotFound
from corral.models.base import (
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelUsage,
)
from corral.tools.resolve import custom_tools, enabled_builtins

INTERRUPTED_OUTCOME_UNKNOWN = (
    "The tool call was interrupted (the agent runtime restarted while it ran); its outcome "
    "is unknown and it was not run again. Check its effects before retrying."
)


async def act(run: Run, action: Action, state: SessionState) -> None:
    """Carry out `action` (never `Halt`)."""
    if isinstance(action, CallModel):
        await call_model(run, state)
    elif isinstance(action, RunTools):
        await run_tools(run, action.calls, state)
    elif isinstance(action, RepairDangling):
        await repair_dangling(run, action.calls)
    elif isinstance(action, RequestAction):
        await run.append(ev.status_idle("requires_action", action.event_ids))
    elif isinstance(action, (FinishTurn, HandleInterrupt)):
        await run.append(ev.status_idle("end_turn"))


async def repair_dangling(run: Run, calls: tuple[ToolCall, ...]) -> None:
    """Report unknown outcomes instead of re-running side effects (invariant 4)."""
    await run.append(
        *(
            ev.tool_result(c.event_id, ev.text_content(INTERRUPTED_OUTCOME_UNKNOWN), is_error=True)
            for c in calls
        )
    )


async def run_tools(run: Run, calls: tuple[ToolCall, ...], state: SessionState) -> None:
    """Execute confirmed calls; denied ones get the denial as an error result."""
    if state.status != "running":
        await run.append(ev.event("session.status_running"))
    for call in calls:
        if call.confirmation == "deny":
            reason = call.deny_message or "The user denied this tool call."
            await run.append(
                ev.tool_result(
                    call.event_id,
                    ev.text_content(f"Permission denied by the user: {reason}"),
                    is_error=True,
                )
            )
        else:
            await execute_builtin(run, call.event_id, call.name, call.input)


async def execute_builtin(run: Run, call_id: str, name: str, tool_input: dict[str, Any]) -> None:
    """Run one built-in tool in the session's sandbox and append its result."""
    sandboxes = run.deps.sandboxes
    if sandboxes is None:
        await run.append(
            ev.tool_result(
                call_id,
                ev.text_content("No sandbox provider is configured on this server."),
                is_error=True,
            )
        )
        return
    if name == "web_fetch":
        tool_input = web_fetch_input(run.agent, tool_input)

    async def work() -> Any:
        return await sandboxes.execute(run.fence.session_id, name, tool_input)

    output, interrupted = await run.interruptible(work)
    if interrupted or output is None:
        await run.append(
            ev.tool_result(
                call_id,
                ev.text_content("Interrupted by the user before the tool finished."),
                is_error=True,
            )
        )
        return
    await run.append(ev.tool_result(call_id, output.content, is_error=output.is_error))


def web_fetch_input(agent: dict[str, Any], tool_input: dict[str, Any]) -> dict[str, Any]:
    """What the sandbox gets for a web_fetch call: the model's `url` and `max_content_tokens`,
    bounded by the tool's resolved config (`max_content_tokens`, and `allowed_domains` /
    `blocked_domains`, which the in-sandbox agent checks on the URL and every redirect hop).
    Other keys the model sent are dropped, so it cannot pass its own domain lists."""
    config = enabled_builtins(agent.get("tools") or []).get("web_fetch") or {}
    out: dict[str, Any] = {"url": tool_input.get("url")}
    tokens, cap = tool_input.get("max_content_tokens"), config.get("max_content_tokens")
    if isinstance(cap, int) and cap > 0:
        tokens = min(tokens, cap) if isinstance(tokens, int) and tokens > 0 else cap
    if tokens is not None:
        out["max_content_tokens"] = tokens
    for key in ("allowed_domains", "blocked_domains"):
        if isinstance(config.get(key), list):
            out[key] = list(config[key])
    return out


async def call_model(run: Run, state: SessionState) -> None:
    """One model request with retries; append the completed response, then run its tools."""
    agent = run.agent
    if (blocked := _unsupported_at_runtime(agent)) is not None:
        await run.append(blocked, ev.status_idle("retries_exhausted"))
        return
    model_name = str(agent["model"]["id"])
    if settings_eager(run):
        assert run.deps.sandboxes is not None
        await run.deps.sandboxes.ensure(run.fence.session_id)
    first = [] if state.status == "running" else [ev.event("session.status_running")]
    start = ev.event("span.model_request_start")
    await run.append(*first, start)
    skills = await _skill_lines(run, agent)
    start_seq = next(e.seq for e in reversed(run.events) if e.id == start["id"])
    seen = [e.body for e in run.events if e.seq <= start_seq]
    request = build_request(agent, seen, model_name=model_name, skills=skills)
    settings = run.deps.settings
    for attempt in range(settings.max_model_retries + 1):
        error: ModelError | None
        try:
            client = run.deps.models.client_for(model_name)
        except ValueError as exc:
            error = ModelError("invalid_request", str(exc), retryable=False)
        else:
            response, interrupted, error = await _attempt(run, client, request)
            if interrupted:
                await run.append(ev.span_end(start["id"], _zero(), is_error=True))
                return
            if response is not None:
                await _record_response(run, start["id"], response)
                return
        assert error is not None
        if not error.retryable or attempt == settings.max_model_retries:
            await run.append(
                ev.span_end(start["id"], _zero(), is_error=True),
                ev.model_error(error, "exhausted"),
                ev.status_idle("retries_exhausted"),
            )
            return
        await run.append(ev.event("session.status_rescheduled"), ev.model_error(error, "retrying"))
        delay = min(settings.retry_base_seconds * 2**attempt, settings.retry_max_seconds)
        await anyio.sleep(delay)
        await run.append(ev.event("session.status_running"))


async def _attempt(
    run: Run, client: ModelClient, request: ModelRequest
) -> tuple[ModelResponse | None, bool, ModelError | None]:
    async def work() -> ModelResponse | ModelError:
        try:
            return await stream_response(run, client, request)
        except ModelError as exc:
            return exc

    outcome, interrupted = await run.interruptible(work)
    if isinstance(outcome, ModelError):
        return None, interrupted, outcome
    return outcome, interrupted, None


async def _record_response(run: Run, start_id: str, response: ModelResponse) -> None:
    agent = run.agent
    builtins = enabled_builtins(agent.get("tools") or [])
    customs = custom_tools(agent.get("tools") or [])
    out: list[dict[str, Any]] = []
    to_run: list[dict[str, Any]] = []
    refusals: list[dict[str, Any]] = []
    for block in response.content:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            out.append(
                ev.event(
                    "agent.message",
                    id=block.get("_event_id"),
                    content=[{"type": "text", "text": block["text"]}],
                )
            )
        elif kind in ("thinking", "redacted_thinking"):
            out.append(ev.event("agent.thinking", id=block.get("_event_id")))
        elif kind == "tool_use":
            use, runnable, refusal = _tool_use_event(block, builtins, customs)
            out.append(use)
            if runnable:
                to_run.append(use)
            if refusal is not None:
                refusals.append(refusal)
    out.append(ev.span_end(start_id, response.usage))
    if response.stop_reason == "refusal":
        out.append(ev.status_idle("refusal"))
    await run.append(*out, *refusals)
    for use in to_run:
        await execute_builtin(run, use["id"], use["name"], use["input"])


def _tool_use_event(
    block: dict[str, Any], builtins: dict[str, dict[str, Any]], customs: dict[str, Any]
) -> tuple[dict[str, Any], bool, dict[str, Any] | None]:
    name, tool_input = str(block.get("name")), dict(block.get("input") or {})
    if name in customs:
        return ev.event("agent.custom_tool_use", name=name, input=tool_input), False, None
    config = builtins.get(name)
    if config is None:
        use = ev.event("agent.tool_use", name=name, input=tool_input, evaluated_permission="deny")
        refusal = ev.tool_result(
            use["id"],
            ev.text_content(f"Tool '{name}' is not enabled for this agent."),
            is_error=True,
        )
        return use, False, refusal
    policy = str((config.get("permission_policy") or {}).get("type", "always_allow"))
    permission = "ask" if policy == "always_ask" else "allow"
    use = ev.event(
        "agent.tool_use",
        name=name,
        input=tool_input,
        evaluated_permission=permission,
        evaluation={"type": policy},
    )
    return use, permission == "allow", None


def _unsupported_at_runtime(agent: dict[str, Any]) -> dict[str, Any] | None:
    for server in agent.get("mcp_servers") or []:
        return ev.session_error(
            "mcp_connection_failed_error",
            f"MCP server '{server['name']}' cannot be used: this Corral build does not run "
            "MCP toolsets yet. Remove the mcp_toolset from the agent to continue.",
            "exhausted",
            mcp_server_name=server["name"],
        )
    if agent.get("multiagent"):
        return ev.session_error(
            "unknown_error",
            "multiagent agents are not supported by this Corral build yet.",
            "exhausted",
        )
    return None


def settings_eager(run: Run) -> bool:
    """Whether this brain emulates the coupled design (sandbox ready before inference)."""
    return run.deps.settings.eager_sandboxes and run.deps.sandboxes is not None


async def _skill_lines(run: Run, agent: dict[str, Any]) -> list[tuple[str, str]]:
    catalog = run.deps.skills
    if catalog is None:
        return []
    lines = []
    for ref in agent.get("skills") or []:
        try:
            lines.append(await catalog.describe(str(ref["skill_id"]), str(ref["version"])))
        except NotFound:
            continue  # deleted after the agent pinned it: nothing to tell the model
    return lines


def _zero() -> ModelUsage:
    return ModelUsage()
