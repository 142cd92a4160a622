"""Plays the incident demo against a Corral server through the official `anthropic` SDK, live.

It uses only `client.beta.*` (no Corral internals), answers the custom tools from local files,
and prints every session event with rich as it arrives.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anthropic
from anthropic.types.beta import (
    BetaManagedAgentsCustomSkillParams,
    BetaManagedAgentsCustomToolInputSchemaParam,
    BetaManagedAgentsCustomToolParams,
    BetaManagedAgentsFileResourceParams,
)
from anthropic.types.beta.agent_create_params import Tool
from anthropic.types.beta.sessions import (
    BetaManagedAgentsAgentCustomToolUseEvent,
    BetaManagedAgentsAgentMessageEvent,
    BetaManagedAgentsAgentToolUseEvent,
    BetaManagedAgentsSessionStatusIdleEvent,
    BetaManagedAgentsSessionStatusRunningEvent,
    BetaManagedAgentsSessionStatusTerminatedEvent,
    BetaManagedAgentsUserCustomToolResultEventParams,
    BetaManagedAgentsUserMessageEvent,
    BetaManagedAgentsUserMessageEventParams,
)
from rich.console import Console

from corral.demo.console import EventPrinter, print_summary
from corral.demo.data import CULPRIT_COMMITS, DEPLOYS, generate
from corral.demo.result import DemoResult
from corral.demo.tools import handle_tool, is_error_result, tool_definitions

SYSTEM_PROMPT = """\
You are the incident commander for Acme Shop's on-call SRE team. When pages fire, find the root
cause of each one with the tools: list the incidents, check recent deploys before anything else,
compare metrics around each deploy, read the diffs of suspicious deploys, and only then confirm in
the logs (grep for counts; never read the whole log). Several pages may share one cause: say
which pages are causes and which are symptoms, name the responsible commit for each cause, and
recommend what to roll back first. Be concise and cite the evidence."""

USER_PROMPT = (
    "Three pages fired in the last 30 minutes (inventory, checkout, cart). It's 2 a.m. and I "
    "need the causes: investigate with the tools, tell me which deploys are responsible, and "
    "what to roll back first."
)
LOG_MOUNT = "/mnt/session/uploads/app.log"
_RECONNECTS = 5


@dataclass(slots=True)
class Loop:
    """Where the conversation stands; rebuilt only from events, so replays are harmless."""

    seen: set[str] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)
    calls: Counter[str] = field(default_factory=Counter)
    final_text: str = ""
    started: bool = False
    stop_reason: str | None = None
    before: Callable[[Any], None] | None = None


def run_demo(
    base_url: str,
    api_key: str,
    model: str = "corral-scripted",
    console: Console | None = None,
    *,
    data_dir: Path | None = None,
    attach_files: bool = False,
    client: anthropic.Anthropic | None = None,
    outputs_dir: Path | None = None,
) -> DemoResult:
    """Create environment, agent and session, play the incident, and report.

    Args:
        base_url: the Corral server, e.g. `http://127.0.0.1:8080`.
        api_key: a Corral API key.
        model: the agent's model; `corral-scripted` is the deterministic offline demo model.
        console: where to print; a fresh rich console by default.
        data_dir: the demo data; generated into a temporary directory when omitted or empty.
        attach_files: also upload app.log (mounted at /mnt/session/uploads/app.log) and the
            runbook skill; needs the server's Files and Skills endpoints.
        client: an SDK client to use instead of one built from `base_url` and `api_key`
            (tests pass one whose HTTP transport is a fake server).
        outputs_dir: where to save the files the agent wrote to /mnt/session/outputs
            (listed with `files.list(scope_id=session)` and downloaded); skipped when None.
    """
    console = console or Console(highlight=False)
    client = client or anthropic.Anthropic(base_url=base_url, api_key=api_key)
    with _demo_data(data_dir) as data:
        printer = EventPrinter(console, scripted=model.startswith("corral-scripted"))
        printer.header(model, base_url)
        session_id = _create_session(client, model, data, attach_files=attach_files)
        state = play(client, session_id, data, printer, USER_PROMPT)
    usage = client.beta.sessions.retrieve(session_id).usage
    if outputs_dir is not None:
        download_outputs(client, session_id, outputs_dir, console)
    known = {d["commit"] for d in DEPLOYS}
    result = DemoResult(
        session_id=session_id,
        final_text=state.final_text,
        tool_calls=dict(state.calls),
        stop_reason=state.stop_reason or "stream_ended",
        found_commits=frozenset(c for c in known if c in state.final_text),
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        scripted=printer.scripted,
    )
    print_summary(console, result, culprits=CULPRIT_COMMITS)
    return result


def download_outputs(
    client: anthropic.Anthropic, session_id: str, target: Path, console: Console
) -> list[Path]:
    """Save the session's output files; names come from the sandbox, so keep basenames only."""
    saved = []
    for meta in client.beta.files.list(scope_id=session_id):
        name = Path(meta.filename).name
        if not name or name.startswith(".") or meta.size_bytes > 20 * 1024 * 1024:
            continue
        target.mkdir(parents=True, exist_ok=True)
        path = target / name
        path.write_bytes(client.beta.files.download(meta.id).read())
        saved.append(path)
        console.print(f"[bold]📄 output[/] {name} ({meta.size_bytes:,} bytes) saved to {path}")
    return saved


@contextmanager
def _demo_data(data_dir: Path | None) -> Iterator[Path]:
    if data_dir is not None:
        if not (data_dir / "incidents.json").exists():
            generate(data_dir)
        yield data_dir
        return
    with tempfile.TemporaryDirectory(prefix="corral-demo-") as tmp:
        yield generate(Path(tmp)).root


def _create_session(
    client: anthropic.Anthropic, model: str, data: Path, *, attach_files: bool
) -> str:
    env = client.beta.environments.create(
        name="corral-demo", config={"type": "cloud", "networking": {"type": "unrestricted"}}
    )
    tools: list[Tool] = [{"type": "agent_toolset_20260401"}]
    tools += [custom_tool(definition) for definition in tool_definitions()]
    skills: list[BetaManagedAgentsCustomSkillParams] = []
    resources: list[BetaManagedAgentsFileResourceParams] = []
    if attach_files:
        skills.append({"type": "custom", "skill_id": _upload_skill(client, data)})
        with (data / "app.log").open("rb") as log:
            uploaded = client.beta.files.upload(file=("app.log", log, "text/plain"))
        resources.append({"type": "file", "file_id": uploaded.id, "mount_path": LOG_MOUNT})
    agent = client.beta.agents.create(
        name="incident-commander", model=model, system=SYSTEM_PROMPT, tools=tools, skills=skills
    )
    session = client.beta.sessions.create(
        agent=agent.id, environment_id=env.id, title="2 a.m. pages", resources=resources
    )
    return session.id


def custom_tool(definition: dict[str, Any]) -> BetaManagedAgentsCustomToolParams:
    schema = cast(BetaManagedAgentsCustomToolInputSchemaParam, definition["input_schema"])
    return {
        "type": "custom",
        "name": definition["name"],
        "description": definition["description"],
        "input_schema": schema,
    }


def _upload_skill(client: anthropic.Anthropic, data: Path) -> str:
    skill_md = data / "skills" / "incident-triage-runbook" / "SKILL.md"
    entry = ("incident-triage-runbook/SKILL.md", skill_md.read_bytes(), "text/markdown")
    return client.beta.skills.create(files=[entry], display_name="Incident triage runbook").id


Hook = Callable[[Any], None]
"""Called with each new event before it is printed."""


def play(
    client: anthropic.Anthropic,
    session_id: str,
    data: Path,
    printer: EventPrinter,
    prompt: str,
    *,
    before: Hook | None = None,
) -> Loop:
    """Open the stream first, then send the prompt; reconnect (and catch up) if it drops.

    Custom tool calls (also a child thread's, cross-posted to the session) are answered from
    `data`; returns when the session's own turn ends."""
    state = Loop(before=before)
    for attempt in range(_RECONNECTS + 1):
        with client.beta.sessions.events.stream(session_id) as stream:
            if attempt == 0:
                message: BetaManagedAgentsUserMessageEventParams = {
                    "type": "user.message",
                    "content": [{"type": "text", "text": prompt}],
                }
                client.beta.sessions.events.send(session_id, events=[message])
            else:
                printer.note(f"stream closed; reconnecting ({attempt}/{_RECONNECTS})")
                # Events logged while disconnected; `_step` skips the ones already handled.
                for past in client.beta.sessions.events.list(session_id, order="asc"):
                    if _step(client, session_id, data, printer, state, past):
                        return state
            for live in stream:
                if _step(client, session_id, data, printer, state, live):
                    return state
    printer.note("gave up waiting: the stream kept closing before the turn ended")
    return state


def _step(
    client: anthropic.Anthropic,
    session_id: str,
    data: Path,
    printer: EventPrinter,
    state: Loop,
    event: Any,
) -> bool:
    """Handle one event (once, however often it is replayed); True when the turn is over.

    `event` is any SDK event model: stream and list events are different unions of the same types.
    """
    if event.id in state.seen:
        return False
    state.seen.add(event.id)
    if state.before is not None:
        state.before(event)
    printer.show(event)
    if isinstance(
        event, BetaManagedAgentsUserMessageEvent | BetaManagedAgentsSessionStatusRunningEvent
    ):
        state.started = True
    elif isinstance(event, BetaManagedAgentsAgentMessageEvent):
        state.final_text = "".join(getattr(b, "text", "") for b in event.content)
    elif isinstance(event, BetaManagedAgentsAgentToolUseEvent):
        state.calls[event.name] += 1
    elif isinstance(event, BetaManagedAgentsAgentCustomToolUseEvent):
        state.calls[event.name] += 1
        _answer(client, session_id, data, state, event)
    elif isinstance(event, BetaManagedAgentsSessionStatusTerminatedEvent):
        state.stop_reason = "terminated"
        return True
    elif isinstance(event, BetaManagedAgentsSessionStatusIdleEvent) and state.started:
        # requires_action means "waiting for your answer", not "done".
        state.stop_reason = event.stop_reason.type
        return state.stop_reason != "requires_action"
    return False


def _answer(
    client: anthropic.Anthropic,
    session_id: str,
    data: Path,
    state: Loop,
    event: BetaManagedAgentsAgentCustomToolUseEvent,
) -> None:
    if event.id in state.answered:
        return
    state.answered.add(event.id)
    text = handle_tool(data, event.name, event.input)
    result: BetaManagedAgentsUserCustomToolResultEventParams = {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": event.id,
        "content": [{"type": "text", "text": text}],
        "is_error": is_error_result(text),
    }
    client.beta.sessions.events.send(session_id, events=[result])
