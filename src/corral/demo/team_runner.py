"""The demo's second act through the official SDK: a coordinator, two threads, a memory store.

After the triage, a coordinator agent (`multiagent: {type: "coordinator"}`) reads the
post-mortem, starts the log analyst and the diff reviewer on child threads that work at the
same time in the session's shared sandbox (the reviewer's `get_diff` calls reach this client
cross-posted on the session's stream and are answered on the session), waits for their
replies and writes the lessons into a memory store mounted at /mnt/memory/<slug>. A later
session that mounts the same store read-only reads them back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
from anthropic.types.beta.agent_create_params import Tool
from anthropic.types.beta.session_create_params import Resource
from rich.console import Console

from corral.demo import team
from corral.demo.console import EventPrinter, print_team_summary
from corral.demo.result import DemoResult, TeamResult
from corral.demo.runner import custom_tool, play
from corral.demo.tools import tool_definitions

_TOOLSET: Tool = {"type": "agent_toolset_20260401"}


def run_team_act(
    client: anthropic.Anthropic,
    model: str,
    console: Console,
    *,
    first: DemoResult,
    data: Path,
) -> TeamResult:
    """Play the second act after `first` (the triage), on its environment and files."""
    printer = EventPrinter(console, scripted=model.startswith("corral-scripted"))
    printer.act(
        "Act 2: the post-mortem follow-up",
        f"{team.COORDINATOR} delegates to {team.LOG_ANALYST} and {team.DIFF_REVIEWER} on "
        "child threads,\nthen saves the lessons to a memory store that a later session reads.",
    )
    triage = client.beta.sessions.retrieve(first.session_id)
    store = client.beta.memory_stores.create(
        name=team.MEMORY_NAME, description=team.MEMORY_DESCRIPTION
    )
    resources = _inputs(client, triage, first)
    resources.append(
        {
            "type": "memory_store",
            "memory_store_id": store.id,
            "access": "read_write",
            "instructions": team.MEMORY_WRITE_INSTRUCTIONS,
        }
    )
    lead = _team_agents(client, model)
    session = client.beta.sessions.create(
        agent=lead,
        environment_id=triage.environment_id,
        title="Post-mortem follow-up",
        resources=resources,
    )

    def show_thread_work(event: Any) -> None:
        if event.type == "agent.thread_message_received" and event.from_agent_name:
            thread = event.from_session_thread_id
            log = client.beta.sessions.threads.events.list(thread, session_id=session.id)
            printer.thread_work(event.from_agent_name, thread, list(log))

    play(client, session.id, data, printer, team.COORDINATOR_PROMPT, before=show_thread_work)
    threads = tuple(
        (t.id, str(getattr(t.agent, "name", t.agent.type)), t.status)
        for t in client.beta.sessions.threads.list(session.id)
    )
    saved = _saved(client, store.id, session.id, console)
    followup_id, final_text = _followup(client, printer, model, data, store.id, triage)
    result = TeamResult(
        session_id=session.id,
        followup_id=followup_id,
        memory_store_id=store.id,
        threads=threads,
        replies=_replies(client, session.id),
        saved=saved,
        read_back=_read_back(client, store.id, followup_id),
        final_text=final_text,
    )
    print_team_summary(console, result, scripted=printer.scripted)
    return result


def _inputs(client: anthropic.Anthropic, triage: Any, first: DemoResult) -> list[Resource]:
    """The triage's log (same file, same mount) and its post-mortem: the file the agent wrote
    to its outputs or, if it wrote none, its final answer."""
    resources: list[Resource] = [
        {"type": "file", "file_id": r.file_id, "mount_path": r.mount_path}
        for r in triage.resources
        if r.type == "file"
    ]
    written = [
        f for f in client.beta.files.list(scope_id=first.session_id) if f.filename.endswith(".md")
    ]
    if written:
        file_id = written[0].id
    else:
        text = first.final_text or "(the triage ended without an answer)"
        upload = ("postmortem.md", text.encode(), "text/markdown")
        file_id = client.beta.files.upload(file=upload).id
    resources.append({"type": "file", "file_id": file_id, "mount_path": team.POSTMORTEM_MOUNT})
    return resources


def _team_agents(client: anthropic.Anthropic, model: str) -> str:
    """The two roster agents and their coordinator; returns the coordinator's id."""
    agents = client.beta.agents
    analyst = agents.create(
        name=team.LOG_ANALYST,
        description="Builds timelines from app.log with grep and awk.",
        model=model,
        system=team.ANALYST_SYSTEM,
        tools=[_TOOLSET],
    )
    get_diff = next(d for d in tool_definitions() if d["name"] == "get_diff")
    reviewer = agents.create(
        name=team.DIFF_REVIEWER,
        description="Reviews the diffs of deployed commits.",
        model=model,
        system=team.REVIEWER_SYSTEM,
        tools=[_TOOLSET, custom_tool(get_diff)],
    )
    lead = agents.create(
        name=team.COORDINATOR,
        model=model,
        system=team.COORDINATOR_SYSTEM,
        tools=[_TOOLSET],
        multiagent={"type": "coordinator", "agents": [analyst.id, reviewer.id]},
    )
    return lead.id


def _saved(
    client: anthropic.Anthropic, store_id: str, session_id: str, console: Console
) -> tuple[str, ...]:
    """Print and return the memory versions this session wrote through its mount."""
    versions = client.beta.memory_stores.memory_versions.list(store_id, session_id=session_id)
    paths = []
    for v in versions:
        actor = v.created_by
        by = f"{actor.type} {getattr(actor, 'session_id', '')}".strip() if actor else "?"
        console.print(f"[bold]🧠 memory[/] {v.operation} {v.path} [dim](by {by})[/]")
        paths.append(str(v.path))
    return tuple(paths)


def _followup(
    client: anthropic.Anthropic,
    printer: EventPrinter,
    model: str,
    data: Path,
    store_id: str,
    triage: Any,
) -> tuple[str, str]:
    """A later session that mounts the store read-only and asks about a risky change."""
    printer.act(
        "Act 2, later: a new session reads the memory",
        f"{team.ADVISOR} mounts the same memory store (read_only) and checks two risky changes.",
    )
    advisor = client.beta.agents.create(
        name=team.ADVISOR, model=model, system=team.ADVISOR_SYSTEM, tools=[_TOOLSET]
    )
    session = client.beta.sessions.create(
        agent=advisor.id,
        environment_id=triage.environment_id,
        title="Before tonight's release",
        resources=[
            {
                "type": "memory_store",
                "memory_store_id": store_id,
                "access": "read_only",
                "instructions": team.MEMORY_READ_INSTRUCTIONS,
            }
        ],
    )
    state = play(client, session.id, data, printer, team.ADVISOR_PROMPT)
    return session.id, state.final_text


def _replies(client: anthropic.Anthropic, session_id: str) -> int:
    events = client.beta.sessions.events.list(session_id, limit=100)
    return sum(1 for e in events if e.type == "agent.thread_message_received")


def _read_back(client: anthropic.Anthropic, store_id: str, session_id: str) -> bool:
    """Whether a tool result of `session_id` shows a line (20+ characters) of a memory."""
    memories = client.beta.memory_stores.memories.list(store_id, view="full")
    lines = {
        line.strip()
        for m in memories
        for line in (getattr(m, "content", None) or "").splitlines()
        if len(line.strip()) >= 20
    }
    for event in client.beta.sessions.events.list(session_id, limit=100):
        if event.type == "agent.tool_result":
            text = " ".join(getattr(b, "text", "") or "" for b in event.content or [])
            if any(line in text for line in lines):
                return True
    return False
