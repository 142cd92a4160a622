"""The brain's thread actions on a run: the coordinator's thread tools and the relay of a
child's outbox (the pure thread fold and helpers are in `brain/threads.py`)."""

from __future__ import annotations

import contextlib
from typing import Any

from corral.brain import events as ev
from corral.brain.run import Run
from corral.brain.state import ToolCall
from corral.brain.threads import (
    NOTHING_TO_WAIT_FOR,
    is_thread_tool,
    roster,
    thread_tool_use,
    tool_definitions,
    wait_empty,
)
from corral.errors import Conflict, NotFound
from corral.ids import now_rfc3339
from corral.session.threads import (
    MAX_THREADS,
    SEND_TOOL,
    START_TOOL,
    child_thread_id,
    derived_event_id,
    primary_thread_id,
)
from corral.store.base import Page, SessionFilter, SessionRow


async def run_thread_tool(run: Run, call: ToolCall, running: list[dict[str, Any]]) -> None:
    """Serve one thread tool call and log its result (with the events it causes)."""
    if call.name == START_TOOL:
        extra, text, error = await _start(run, call)
    elif call.name == SEND_TOOL:
        extra, text, error = await _send(run, call)
    elif wait_empty(run.state, call):  # decide runs an empty wait only when none works
        extra, text, error = [], NOTHING_TO_WAIT_FOR, True
    else:
        extra, text, error = [], "Thread message(s) arrived; they follow this result.", False
    result = ev.tool_result(call.event_id, ev.text_content(text), is_error=error)
    await run.append(*running, *extra, result)


async def _start(run: Run, call: ToolCall) -> tuple[list[dict[str, Any]], str, bool]:
    name, task = call.input.get("agent"), call.input.get("task")
    if not isinstance(name, str) or not isinstance(task, str) or not task:
        return [], "`agent` and `task` must be non-empty strings.", True
    chosen = next((a for a in roster(run.agent) if name in (a.get("name"), a.get("id"))), None)
    if chosen is None:
        names = ", ".join(str(a.get("name")) for a in roster(run.agent))
        return [], f"No agent named {name!r} in this roster (agents: {names}).", True
    session = run.session
    thread_id = child_thread_id(call.event_id)
    children = await run.deps.store.list_sessions(
        Page(limit=MAX_THREADS + 1), SessionFilter(parent_id=session.id)
    )
    if thread_id not in {c.id for c in children} and len(children) >= MAX_THREADS:
        return [], f"thread_limit_error: at most {MAX_THREADS} threads per session.", True
    agent_name = str(chosen.get("name"))
    content = ev.text_content(task)
    body = {k: v for k, v in session.body.items() if k not in ("title", "metadata", "agent")}
    body["agent"] = chosen
    row = SessionRow(
        id=thread_id,
        created_at=now_rfc3339(),
        environment_id=session.environment_id,
        agent_id=str(chosen["id"]),
        agent_version=int(chosen["version"]),
        body=body,
        parent_id=session.id,
    )
    first = [
        ev.event(
            "corral.thread_role",
            parent_session_id=session.id,
            parent_thread_id=primary_thread_id(session.id),
            thread_id=thread_id,
            agent_name=agent_name,
        ),
        ev.event(
            "agent.thread_message_received",
            id=derived_event_id(call.event_id, "task"),
            from_session_thread_id=primary_thread_id(session.id),
            content=content,
        ),
    ]
    with contextlib.suppress(Conflict):  # made by an earlier run of this call
        await run.deps.store.create_session(row, first)
    extra = [
        ev.event("session.thread_created", session_thread_id=thread_id, agent_name=agent_name),
        ev.event(
            "agent.thread_message_sent",
            to_session_thread_id=thread_id,
            to_agent_name=agent_name,
            content=content,
        ),
    ]
    return extra, f"Started thread {thread_id} ({agent_name}).", False


async def _send(run: Run, call: ToolCall) -> tuple[list[dict[str, Any]], str, bool]:
    thread_id, message = call.input.get("thread_id"), call.input.get("message")
    if not isinstance(thread_id, str) or not isinstance(message, str) or not message:
        return [], "`thread_id` and `message` must be non-empty strings.", True
    child = await run.deps.store.get_session(thread_id)
    if child is None or child.parent_id != run.session.id:
        return [], f"No thread {thread_id!r} in this session.", True
    if child.archived_at is not None or child.summary.status == "terminated":
        return [], f"Thread {thread_id} is archived and takes no more messages.", True
    content = ev.text_content(message)
    received = ev.event(
        "agent.thread_message_received",
        id=derived_event_id(call.event_id, "message"),
        from_session_thread_id=primary_thread_id(run.session.id),
        content=content,
    )
    await deliver(run, thread_id, received, wake=True)
    agent_name = str(child.body.get("agent", {}).get("name", ""))
    sent = ev.event(
        "agent.thread_message_sent",
        to_session_thread_id=thread_id,
        to_agent_name=agent_name,
        content=content,
    )
    return [sent], f"Message sent to thread {thread_id}.", False


async def deliver(run: Run, session_id: str, body: dict[str, Any], *, wake: bool) -> None:
    """Append `body` (an id derived or copied: idempotent) to another log, once."""
    try:
        await run.deps.store.append(session_id, [body], wake=wake)
    except Conflict:
        pass  # delivered by an earlier run
    except NotFound:
        pass  # that log was deleted: nobody is left to tell


async def relay(run: Run) -> None:
    """Deliver the outbox to the parent's log, then log `corral.relayed` (and the replies'
    `agent.thread_message_sent`) under this thread's fence."""
    ts = run.state.thread
    assert ts.role is not None
    parent = ts.role.parent_session_id
    sent: list[dict[str, Any]] = []
    for item in list(ts.outbox):
        await deliver(run, parent, item.body, wake=item.wake)
        if item.sent is not None:
            sent.append(item.sent)
    await run.append(*sent, ev.event("corral.relayed", seq=ts.outbox[-1].seq))


class ThreadTools:
    """The coordinator's thread tools as a tool family (`tool_provider.ToolProvider`)."""

    def definitions(self, agent: dict[str, Any]) -> list[dict[str, Any]]:
        return tool_definitions(agent)

    def use_event(self, agent: dict[str, Any], name: str, tool_input: Any) -> dict[str, Any] | None:
        return thread_tool_use(agent, name, tool_input)

    def owns(self, call: ToolCall) -> bool:
        return is_thread_tool(call)

    async def run(self, run: Run, call: ToolCall, running: list[dict[str, Any]]) -> None:
        await run_thread_tool(run, call, running)
