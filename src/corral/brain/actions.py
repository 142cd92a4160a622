"""One function per action kind. Each performs at most one side effect (one tool call or one
model call), logging before and after it, then returns to `decide`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, assert_never

from corral.brain import compaction, retry
from corral.brain import events as ev
from corral.brain.context import build_request, with_memory_section
from corral.brain.cost import usage_events
from corral.brain.credentials import credential_errors
from corral.brain.decide import (
    Action,
    AnswerLost,
    CallModel,
    Compact,
    FinishTurn,
    Halt,
    HandleInterrupt,
    RefuseTool,
    RepairDangling,
    RequestAction,
    RunTool,
    StopAtBudget,
    StopAtCompactionLimit,
)
from corral.brain.mcp import mcp_use_event
from corral.brain.mcp_calls import offer_for, run_mcp_tool
from corral.brain.remote import answer_lost, request_action
from corral.brain.run import Run
from corral.brain.state import ToolCall
from corral.brain.stream import stream_response
from corral.brain.thread_calls import ThreadTools, relay
from corral.brain.threads import Relay
from corral.brain.tool_provider import ToolProvider
from corral.brain.web_search import WebSearchTools
from corral.errors import NotFound
from corral.models.base import ModelError, ModelRequest, ModelResponse, ModelUsage
from corral.tools.resolve import custom_tools, enabled_builtins
from corral.wire.events import Permission

INTERRUPTED_OUTCOME_UNKNOWN = (
    "The tool call was interrupted (the agent runtime restarted while it ran); its outcome "
    "is unknown and it was not run again. Check its effects before retrying."
)
INTERRUPTED_BY_USER = "Interrupted by the user before the tool finished."


async def act(run: Run, action: Action) -> None:
    """Carry out `action` on a run whose state is the one `decide` saw."""
    match action:
        case CallModel():
            await call_model(run, action)
        case RunTool():
            await run_tool(run, action.call)
        case RefuseTool():
            await refuse_tool(run, action.call)
        case RepairDangling():
            await repair_dangling(run, action.calls)
        case RequestAction():
            await request_action(run, action)
        case AnswerLost():
            await answer_lost(run, action)
        case Compact():
            await compaction.compact(run, action)
        case StopAtBudget() | StopAtCompactionLimit() | HandleInterrupt() | FinishTurn():
            await close_turn(run, action)
        case Relay():
            await relay(run)
        case Halt():
            pass
        case _:
            assert_never(action)  # a new action without its case fails the type check


BUILT_IN_FAMILIES: tuple[ToolProvider[Run], ...] = (ThreadTools(), WebSearchTools())
"""Tool families the brain serves itself, besides the sandbox toolset, MCP and custom tools
(`tool_provider.ToolProvider`)."""


def families(run: Run) -> tuple[ToolProvider[Run], ...]:
    """The tool families in lookup order: the brain's extra ones first, then the built-in."""
    return (*run.deps.tools, *BUILT_IN_FAMILIES)


def _family_use(run: Run, name: str, tool_input: Any) -> dict[str, Any] | None:
    """The use event a family logs for the model's call of `name`, if a family owns it."""
    for family in families(run):
        use = family.use_event(run.agent, name, tool_input)
        if use is not None:
            return use
    return None


def _with_family_tools(run: Run, request: ModelRequest) -> ModelRequest:
    """`request` with every family's tool definitions for the agent added."""
    extra = [d for family in families(run) for d in family.definitions(run.agent)]
    return replace(request, tools=[*request.tools, *extra]) if extra else request


async def close_turn(
    run: Run, action: StopAtBudget | StopAtCompactionLimit | HandleInterrupt | FinishTurn
) -> None:
    """End the turn: the idle (and its reason) each turn-ending action stands for."""
    match action:
        case StopAtBudget():
            await run.append(ev.status_idle("budget_reached"))
        case StopAtCompactionLimit():
            await compaction.stop_at_limit(run)
        case HandleInterrupt() | FinishTurn():
            await run.append(ev.status_idle("end_turn"))
        case _:
            assert_never(action)


def _going_running(run: Run) -> list[dict[str, Any]]:
    """`session.status_running` unless already running (read before this action appends)."""
    return [] if run.state.status == "running" else [ev.event("session.status_running")]


async def repair_dangling(run: Run, calls: tuple[ToolCall, ...]) -> None:
    """Report unknown outcomes instead of re-running side effects (invariant 4)."""
    await run.append(
        *(
            ev.call_result(
                c.event_id, c.kind, ev.text_content(INTERRUPTED_OUTCOME_UNKNOWN), is_error=True
            )
            for c in calls
        )
    )


async def refuse_tool(run: Run, call: ToolCall) -> None:
    """A call the client denied gets the denial as its (error) result; nothing runs."""
    reason = call.deny_message or "The user denied this tool call."
    await run.append(
        *_going_running(run),
        ev.call_result(
            call.event_id,
            call.kind,
            ev.text_content(f"Permission denied by the user: {reason}"),
            is_error=True,
        ),
    )


async def run_tool(run: Run, call: ToolCall) -> None:
    """Log the call's start, run it in the session's sandbox, log its result.

    The start marker is durable before the tool runs, so a brain that dies meanwhile leaves a
    started call without result, which the next brain reports instead of running it again.
    """
    since, running = run.state.last_seq, _going_running(run)
    if call.kind == "mcp":  # served by the agent's MCP server, from the brain
        await run_mcp_tool(run, call, running)
        return
    family = next((f for f in families(run) if f.owns(call)), None)
    if family is not None:  # served by the brain itself, no sandbox
        await family.run(run, call, running)
        return
    sandboxes = run.deps.sandboxes
    if sandboxes is None:
        text = ev.text_content("No sandbox provider is configured on this server.")
        await run.append(*running, ev.tool_result(call.event_id, text, is_error=True))
        return
    tool_input = call.input
    if call.name == "web_fetch":
        tool_input = web_fetch_input(run.agent, tool_input)
    await run.append(*running, ev.tool_started(call.event_id))

    async def work() -> Any:
        return await sandboxes.execute(run.sandbox_id, call.name, tool_input)

    output, _ = await run.until_interrupt(work, after=since)
    notices = [  # repositories that could not be cloned: the session goes on without them
        ev.session_error(f.type, f.message, "retrying", repository_url=f.url)
        for f in sandboxes.take_notices(run.sandbox_id)
    ]
    if output is None:
        text = ev.text_content(INTERRUPTED_BY_USER)
        await run.append(*notices, ev.tool_result(call.event_id, text, is_error=True))
        return
    await run.append(
        *notices, ev.tool_result(call.event_id, output.content, is_error=output.is_error)
    )


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


async def call_model(run: Run, action: CallModel) -> None:
    """One model request (after a backoff when it is a retry); log the complete response, or
    the failure and whether it will be retried. Tools it asks for run in later steps."""
    since, agent = run.state.last_seq, run.agent
    if action.attempt > 0 and not await retry.wait(run, action.attempt, since):
        return  # interrupted while waiting (decide closes the turn) or stopping (handed over)
    if settings_eager(run):
        assert run.deps.sandboxes is not None
        await run.deps.sandboxes.ensure(run.sandbox_id)
    model_name = str(agent["model"]["id"])
    offer = await offer_for(run, since)
    if offer is None:
        return  # interrupted while MCP servers were listed: decide closes the turn
    # a turn starts: say which credentials cannot reach their hosts
    warnings = await credential_errors(run) if _going_running(run) else []
    start = ev.event("span.model_request_start")
    await run.append(*_going_running(run), *warnings, *offer.errors, start)
    messages = run.messages()  # exactly the log up to `start`: what this call answers
    skills = await _skill_lines(run, agent)
    request = offer.extend(build_request(agent, messages, model_name=model_name, skills=skills))
    request = with_memory_section(request, run.session.body)
    request = _with_family_tools(run, request)
    response, error = await _attempt(run, model_name, request, since)
    if response is not None:
        await _record_response(run, start["id"], response, offer.by_name)
    else:
        await _record_failure(run, start["id"], error, action.attempt)


async def _record_failure(run: Run, start_id: str, error: ModelError | None, attempt: int) -> None:
    """Close the span; say whether the call will be retried (`error` None: interrupted)."""
    failed = ev.span_end(start_id, _zero(), is_error=True)
    if error is None:
        await run.append(failed)
        return
    planned = retry.plan(run.deps.settings, error, attempt, run.state.retry_since)
    if isinstance(planned, retry.GiveUp):
        run.telemetry.model_failed(planned.error, "exhausted", attempt)
        await run.append(
            failed, ev.model_error(planned.error, "exhausted"), ev.status_idle("retries_exhausted")
        )
    else:
        run.retry_delay = planned.delay
        run.telemetry.model_failed(error, "retrying", attempt)
        await run.append(
            failed, ev.event("session.status_rescheduled"), ev.model_error(error, "retrying")
        )


async def _attempt(
    run: Run, model_name: str, request: ModelRequest, since: int
) -> tuple[ModelResponse | None, ModelError | None]:
    """(response, None), (None, error), or (None, None) when an interrupt cancelled it."""
    try:
        client = run.deps.models.client_for(model_name)
    except ValueError as exc:
        return None, ModelError("invalid_request", str(exc), retryable=False)

    async def work() -> ModelResponse | ModelError:
        try:
            return await stream_response(run, client, request)
        except ModelError as exc:
            return exc

    outcome, _ = await run.until_interrupt(work, after=since)
    if isinstance(outcome, ModelError):
        return None, outcome
    return outcome, None


async def _record_response(
    run: Run, start_id: str, response: ModelResponse, mcp_names: dict[str, tuple[str, str]]
) -> None:
    agent = run.agent
    builtins = enabled_builtins(agent.get("tools") or [])
    customs = custom_tools(agent.get("tools") or [])
    out: list[dict[str, Any]] = []
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
        elif kind == "tool_use" and (
            mcp_use := mcp_use_event(mcp_names, agent, str(block.get("name")), block.get("input"))
        ):
            out.append(mcp_use)
        elif kind == "tool_use" and (
            family_use := _family_use(run, str(block.get("name")), block.get("input"))
        ):
            out.append(family_use)
        elif kind == "tool_use":
            use, refusal = _tool_use_event(block, builtins, customs)
            out.append(use)
            if refusal is not None:
                refusals.append(refusal)
    end = ev.span_end(start_id, response.usage)
    out.append(end)
    out.extend(usage_events(run.state, run.price(), end["model_usage"]))
    if response.stop_reason == "refusal":
        out.append(ev.status_idle("refusal"))
    await run.append(*out, *refusals)


def _tool_use_event(
    block: dict[str, Any], builtins: dict[str, dict[str, Any]], customs: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    name, tool_input = str(block.get("name")), dict(block.get("input") or {})
    if name in customs:
        return ev.event("agent.custom_tool_use", name=name, input=tool_input), None
    config = builtins.get(name)
    if config is None:
        use = ev.event("agent.tool_use", name=name, input=tool_input, evaluated_permission="deny")
        refusal = ev.tool_result(
            use["id"],
            ev.text_content(f"Tool '{name}' is not enabled for this agent."),
            is_error=True,
        )
        return use, refusal
    policy = str((config.get("permission_policy") or {}).get("type", "always_allow"))
    permission: Permission = "ask" if policy == "always_ask" else "allow"
    use = ev.event(
        "agent.tool_use",
        name=name,
        input=tool_input,
        evaluated_permission=permission,
        evaluation={"type": policy},
    )
    return use, None


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
