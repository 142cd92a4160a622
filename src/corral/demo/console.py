"""Renders the demo's session events and summary with rich: one readable line per event.

Presentation only: it reads SDK event models and never calls the API or changes state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from corral.demo.result import DemoResult, TeamResult

_WIDTH = 110


def _clip(text: str, limit: int = _WIDTH) -> str:
    text = " ".join(text.split())
    return escape(text if len(text) <= limit else text[: limit - 1] + "…")


def _blocks_text(content: Any) -> str:
    return " ".join(str(getattr(b, "text", "") or "") for b in content or [])


def _compact(value: Any) -> str:
    return _clip(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str), 90)


class EventPrinter:
    """Prints session events as they arrive; unknown event types get a plain dim line."""

    def __init__(self, console: Console, *, scripted: bool) -> None:
        """`scripted` labels the run as played by the deterministic demo model."""
        self.console = console
        self.scripted = scripted
        self._threads: dict[str, str] = {}
        """Thread id -> agent name, learned from `session.thread_created` events."""
        self._handlers: dict[str, Callable[[Any], RenderableType]] = {
            "user.message": lambda e: (
                f"[bold cyan]👤 user[/]     {_clip(_blocks_text(e.content), 100)}"
            ),
            "agent.message": self._agent_message,
            "agent.thinking": lambda e: "[dim]💭 thinking[/]",
            "agent.tool_use": lambda e: f"[yellow]🔧 {e.name}[/] {_compact(e.input)}",
            "agent.tool_result": lambda e: self._result(e.content, e.is_error),
            "agent.custom_tool_use": self._custom_tool_use,
            "user.custom_tool_result": lambda e: self._result(e.content, e.is_error),
            "session.status_running": lambda e: "[blue]▶  running[/]",
            "session.status_idle": self._idle,
            "session.status_rescheduled": lambda e: "[yellow]↻  rescheduled (transient error)[/]",
            "session.status_terminated": lambda e: "[bold red]⏹  terminated[/]",
            "session.error": self._error,
            "span.model_request_start": lambda e: "[dim]·  model request …[/]",
            "span.model_request_end": self._span_end,
            "session.thread_created": self._thread_created,
            "agent.thread_message_sent": lambda e: (
                f"[magenta]📨 to {escape(e.to_agent_name or e.to_session_thread_id)}[/] "
                f"{_clip(_blocks_text(e.content), 90)}"
            ),
            "agent.thread_message_received": self._thread_reply,
            "session.thread_status_running": lambda e: f"[dim]🧵 {escape(e.agent_name)} running[/]",
            "session.thread_status_idle": lambda e: (
                f"[dim]🧵 {escape(e.agent_name)} idle ({escape(e.stop_reason.type)})[/]"
            ),
            "session.thread_status_terminated": lambda e: (
                f"[red]🧵 {escape(e.agent_name)} terminated[/]"
            ),
        }

    def header(self, model: str, base_url: str) -> None:
        """Announce the run, labelling the scripted model as such."""
        kind = (
            "[bold yellow]scripted demo model[/] - deterministic replay, no LLM involved"
            if self.scripted
            else "live model"
        )
        body = f"server {escape(base_url)}\nmodel  {escape(model)} ({kind})"
        self.console.print(Panel(body, title="Corral demo, act 1: incident triage", expand=False))

    def act(self, title: str, body: str) -> None:
        """Announce a part of the demo (its agents, what it shows)."""
        kind = "scripted demo model" if self.scripted else "live model"
        self.console.print(Panel(escape(body), title=f"{escape(title)} ({kind})", expand=False))

    def thread_work(self, agent: str, thread_id: str, events: list[Any]) -> None:
        """What a child thread did, from its own log: its messages, tool calls and results
        (its calls to the client's custom tools were shown live, cross-posted)."""
        self.console.print(f"[magenta]🧵 {escape(agent)}'s thread[/] [dim]{thread_id}, its log:[/]")
        shown = {"agent.message", "agent.tool_use", "agent.tool_result"}
        work = [e for e in events if e.type in shown]
        if work and work[-1].type == "agent.message":
            work.pop()  # the reply, printed next as the coordinator receives it
        for event in work:
            if event.type == "agent.message":
                line = f"[green]💬[/] {_clip(_blocks_text(event.content), 100)}"
            else:
                line = str(self._handlers[event.type](event))
            self.console.print(f"[magenta]   │[/] {line}", soft_wrap=False)

    def show(self, event: Any) -> None:
        """Print one event on one line (agent messages may wrap)."""
        handler = self._handlers.get(event.type)
        line = handler(event) if handler else f"[dim]·  {escape(event.type)}[/]"
        self.console.print(line, soft_wrap=False)

    def note(self, text: str) -> None:
        """A line from the runner itself, not from the session."""
        self.console.print(f"[dim italic]… {escape(text)}[/]")

    def _agent_message(self, event: Any) -> RenderableType:
        # A grid keeps wrapped lines of a long answer indented under the label.
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=10, no_wrap=True)
        grid.add_column()
        grid.add_row("[bold green]🤖 agent[/]", Text(_blocks_text(event.content).strip()))
        return grid

    def _custom_tool_use(self, event: Any) -> str:
        thread = getattr(event, "session_thread_id", None)
        whose = f"{self._threads.get(thread, thread)}'s " if thread else ""
        return (
            f"[magenta]🧩 {event.name}[/] {_compact(event.input)} "
            f"[dim]({escape(whose)}custom tool, answered here)[/]"
        )

    def _thread_created(self, event: Any) -> str:
        self._threads[event.session_thread_id] = event.agent_name
        name, thread = escape(event.agent_name), event.session_thread_id
        return f"[bold magenta]🧵 thread[/] {name} started [dim]({thread})[/]"

    def _thread_reply(self, event: Any) -> RenderableType:
        sender = event.from_agent_name or "coordinator"
        grid = Table.grid(padding=(0, 1))
        grid.add_column(width=10, no_wrap=True)
        grid.add_column()
        text = Text(f"{sender}: " + _blocks_text(event.content).strip())
        grid.add_row("[bold magenta]📬 reply[/]", text)
        return grid

    def _result(self, content: Any, is_error: bool | None) -> str:
        style = "red" if is_error else "dim"
        mark = "✗" if is_error else "↳"
        return f"[{style}]   {mark} {_clip(_blocks_text(content), 100)}[/]"

    def _idle(self, event: Any) -> str:
        reason = event.stop_reason
        if reason.type == "requires_action":
            return f"[blue]⏸  idle[/] [dim]requires_action: {len(reason.event_ids)} pending[/]"
        return f"[bold blue]⏸  idle[/] ({escape(reason.type)})"

    def _error(self, event: Any) -> str:
        error = event.error
        retry = getattr(getattr(error, "retry_status", None), "type", "?")
        return f"[bold red]✖  {escape(error.type)}[/] {_clip(error.message, 80)} [dim]({retry})[/]"

    def _span_end(self, event: Any) -> str:
        usage = event.model_usage
        status = " [red]error[/]" if event.is_error else ""
        return (
            f"[dim]·  model request done: {usage.input_tokens:,} in / "
            f"{usage.output_tokens:,} out tokens[/]{status}"
        )


def print_summary(console: Console, result: DemoResult, *, culprits: dict[str, str]) -> None:
    """Usage, tool calls and whether the answer named each culprit commit."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_row("session", result.session_id)
    table.add_row("stop reason", result.stop_reason)
    table.add_row("tokens", f"{result.input_tokens:,} in / {result.output_tokens:,} out")
    calls = ", ".join(f"{name} x{n}" for name, n in sorted(result.tool_calls.items()))
    table.add_row("tool calls", escape(calls or "none"))
    for service, commit in culprits.items():
        found = commit in result.found_commits
        mark = "[green]✓ named[/]" if found else "[red]✗ missing[/]"
        table.add_row(f"{service} cause", f"{commit} {mark}")
    symptom = "symptom" in result.final_text.lower() and "cart" in result.final_text.lower()
    table.add_row("cart", "[green]✓ called a symptom[/]" if symptom else "[red]✗ not explained[/]")
    verdict = "[bold green]solved[/]" if result.solved else "[bold red]not solved[/]"
    title = "Summary" + (" (scripted demo model)" if result.scripted else "")
    console.print(Panel(table, title=f"{title}: {verdict}", expand=False))


def _check(ok: bool, yes: str, no: str) -> str:
    return f"[green]✓ {escape(yes)}[/]" if ok else f"[red]✗ {escape(no)}[/]"


def print_team_summary(console: Console, result: TeamResult, *, scripted: bool) -> None:
    """The second act: threads, replies, what was saved to memory and whether it was read."""
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_row("coordinator", result.session_id)
    for thread_id, agent, status in result.threads:
        table.add_row("thread", f"{thread_id} {escape(agent)} ({escape(status)})")
    children = len(result.threads) - 1
    table.add_row(
        "replies",
        _check(
            result.replies >= 2, f"{result.replies} thread replies", f"{result.replies} replies"
        ),
    )
    saved = ", ".join(result.saved)
    table.add_row(
        "memory", _check(bool(result.saved), f"saved {saved} (by the session)", "nothing saved")
    )
    table.add_row("follow-up", result.followup_id)
    table.add_row(
        "read back",
        _check(result.read_back, "the new session read the lessons", "lessons not read"),
    )
    verdict = "[bold green]done[/]" if result.ok else "[bold red]incomplete[/]"
    title = f"Act 2 summary, {children} child threads" + (
        " (scripted demo model)" if scripted else ""
    )
    console.print(Panel(table, title=f"{title}: {verdict}", expand=False))
