"""Build the model's request from the log and the pinned agent; a brain-side transform.

The log keeps every original event; what the model sees (merged turns, synthetic results for
abandoned calls) is derived here and never written back. `Transcript` is extended one event
at a time, so a step costs what the new events add, not the whole conversation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from corral.brain.window import fit_result, summary_text
from corral.models.base import ModelRequest
from corral.tools.builtin import BUILTIN_TOOLS
from corral.tools.mcp_names import mcp_tool_name
from corral.tools.resolve import custom_tools, enabled_builtins
from corral.wire.events import (
    AgentCustomToolUseEvent,
    AgentMcpToolResultEvent,
    AgentMcpToolUseEvent,
    AgentMessageEvent,
    AgentToolResultEvent,
    AgentToolUseEvent,
    ContextSummaryEvent,
    LogEvent,
    SessionStatusIdleEvent,
    SpanModelRequestEndEvent,
    SpanModelRequestStartEvent,
    SystemMessageEvent,
    UserCustomToolResultEvent,
    UserMessageEvent,
    UserToolResultEvent,
    parse_event,
)

_ABANDONED = "The tool call was abandoned (interrupted before it completed)."


def tool_definitions(agent: dict[str, Any]) -> list[dict[str, Any]]:
    """Anthropic tool definitions for the agent's enabled built-ins and custom tools."""
    tools = agent.get("tools") or []
    out = []
    for name in enabled_builtins(tools):
        spec = BUILTIN_TOOLS.get(name)
        if spec is not None:
            out.append(
                {"name": name, "description": spec.description, "input_schema": spec.input_schema}
            )
    for tool in custom_tools(tools).values():
        out.append(
            {
                "name": tool["name"],
                "description": tool["description"],
                "input_schema": tool["input_schema"],
            }
        )
    return out


def system_prompt(agent: dict[str, Any], skills: Sequence[tuple[str, str]]) -> str | None:
    """The agent's system prompt plus the skills it can read in its sandbox."""
    base = agent.get("system")
    if not skills:
        return base
    lines = [f"- {name}: {description or '(no description)'}" for name, description in skills]
    section = (
        "<skills>\nThese skills are available in your sandbox. Before using one, read its "
        "instructions at /mnt/skills/<name>/SKILL.md.\n" + "\n".join(lines) + "\n</skills>"
    )
    return f"{base}\n\n{section}" if base else section


def memory_section(resources: Sequence[Mapping[str, Any]]) -> str | None:
    """The system prompt's memory section: each attached store's mount, access, name,
    description and per-session instructions (all snapshotted on the session's resource)."""
    stores = [r for r in resources if r.get("type") == "memory_store"]
    if not stores:
        return None
    lines = []
    for store in stores:
        line = f"- {store['mount_path']} ({store.get('access') or 'read_write'}): {store['name']}"
        if store.get("description"):
            line += f" - {store['description']}"
        if store.get("instructions"):
            line += f"\n  Instructions: {store['instructions']}"
        lines.append(line)
    return (
        "<memory>\nThese memory stores are mounted in your sandbox; they outlive this session. "
        "Read them before starting work. In a read_write store, files you create, change or "
        "delete (UTF-8 text, at most 100 KB each) are saved to the store when your tool call "
        "ends; if someone else changed the same file meanwhile, their version wins and the "
        "tool result says so.\n" + "\n".join(lines) + "\n</memory>"
    )


def with_memory_section(request: ModelRequest, session: Mapping[str, Any]) -> ModelRequest:
    """`request` with the memory section appended to its system prompt, if any store."""
    section = memory_section(session.get("resources") or [])
    if section is None:
        return request
    system = f"{request.system}\n\n{section}" if request.system else section
    return dataclasses.replace(request, system=system)


def build_request(
    agent: dict[str, Any],
    messages: list[dict[str, Any]],
    *,
    model_name: str,
    skills: Sequence[tuple[str, str]] = (),
) -> ModelRequest:
    """The next model call for a session whose conversation so far is `messages`."""
    return ModelRequest(
        model=model_name,
        system=system_prompt(agent, skills),
        messages=messages,
        tools=tool_definitions(agent),
    )


def build_messages(events: Iterable[Mapping[str, Any] | LogEvent]) -> list[dict[str, Any]]:
    """Alternating user/assistant turns for a whole log (the reduction `Transcript` extends)."""
    transcript = Transcript()
    for event in events:
        transcript.apply(parse_event(event) if isinstance(event, Mapping) else event)
    return transcript.messages()


_ToolResult = (
    AgentToolResultEvent | UserToolResultEvent | UserCustomToolResultEvent | AgentMcpToolResultEvent
)


class Transcript:
    """The conversation as the model sees it, extended event by event.

    Invariants kept on every append (so nothing is rebuilt): turns alternate roles; in a user
    turn, tool results come before other blocks, each group in log order; only the last turn
    is ever changed. Input logged while a model request is in flight is held back and placed
    after that request's response: the request did not contain it, and the follow-up request
    must show it after the answer (not before it, which would end the request with the
    assistant's turn).
    """

    def __init__(self) -> None:
        self.turns: list[dict[str, Any]] = []
        self._open: dict[str, None] = {}
        self._results_in_last = 0
        self._in_flight = False
        self._held: list[dict[str, Any]] = []
        self.blocks_built = 0
        """Blocks made so far (a work counter: per step it grows with new events only)."""
        self.result_cap: int | None = None
        """Tool results above this many estimated tokens are truncated (`window.fit_result`)."""
        self.summary: str | None = None
        """The newest compaction's summary, shown in place of the turns it replaced."""
        self.dropped = 0
        """Turns replaced by the summary (turn indexes in the log count them)."""
        self.weight = 0
        """Estimated bytes held by `turns` (`memory_weight`): what the brain's memo budgets."""

    def apply(self, event: LogEvent) -> None:
        """Add what `event` shows the model (most events show nothing)."""
        match event:
            case UserMessageEvent() | SystemMessageEvent():
                self._add_input(_input_blocks(event))
            case SpanModelRequestStartEvent() | SpanModelRequestEndEvent():
                self._release()  # at a start: a request still in flight died with its brain
                self._in_flight = isinstance(event, SpanModelRequestStartEvent)
            case AgentMessageEvent():
                for block in event.content:
                    if block.get("type") == "text":
                        self._add("assistant", block)
            case AgentToolUseEvent() | AgentCustomToolUseEvent() | AgentMcpToolUseEvent():
                self._open[event.id] = None
                name = event.name
                if isinstance(event, AgentMcpToolUseEvent):
                    name = mcp_tool_name(event.mcp_server_name, event.name)  # as offered
                block = {"type": "tool_use", "id": event.id, "name": name}
                self._add("assistant", {**block, "input": event.input})
            case (
                AgentToolResultEvent()
                | UserToolResultEvent()
                | UserCustomToolResultEvent()
                | AgentMcpToolResultEvent()
            ):
                self._add_result(event)
            case SessionStatusIdleEvent() if event.stop_reason.type != "requires_action":
                for use_id in list(self._open):
                    self._add("user", _result_block(use_id, None))
                self._open.clear()
            case ContextSummaryEvent():
                self._compact(event.summary, event.cut_turn, event.cut_blocks)
            case _:
                pass

    def messages(self) -> list[dict[str, Any]]:
        """The request's `messages`: the summary of compacted turns (if any), every later
        turn, plus placeholder results for calls still open (a request must answer every tool
        use). Earlier turns are shared, not copied; the last one is copied because later
        events extend it in place."""
        out = self._turn_messages()
        if self.summary is None:
            return out
        # The summary starts the new stable prefix: a prompt-cache breakpoint of its own, so
        # requests after a compaction read it (and the tools and system before it) from cache.
        head = {
            "type": "text",
            "text": summary_text(self.summary),
            "cache_control": {"type": "ephemeral"},
        }
        if out and out[0]["role"] == "user":
            return [{"role": "user", "content": [head, *out[0]["content"]]}, *out[1:]]
        return [{"role": "user", "content": [head]}, *out]

    def _compact(self, summary: str, cut_turn: int, cut_blocks: int) -> None:
        """Replace the turns before `cut_turn` (counted from the log's first) and the first
        `cut_blocks` blocks of that turn by `summary` (see `window.choose_cut`)."""
        cut = min(cut_turn - self.dropped, len(self.turns) - 1)
        if cut > 0:
            del self.turns[:cut]
            self.dropped += cut
        if cut_blocks and self.turns:
            first = self.turns[0]
            self.turns[0] = {"role": first["role"], "content": first["content"][cut_blocks:]}
            if len(self.turns) == 1:
                self._results_in_last = max(self._results_in_last - cut_blocks, 0)
        self.summary = summary
        self.weight = len(summary) + sum(
            TURN_BYTES + sum(memory_weight(block) for block in turn["content"])
            for turn in self.turns
        )

    def _turn_messages(self) -> list[dict[str, Any]]:
        placeholders = [_result_block(use_id, None) for use_id in self._open]
        self.blocks_built += len(placeholders)
        extra = [*placeholders, *self._held]
        if not self.turns:
            return [{"role": "user", "content": extra}] if extra else []
        last = self.turns[-1]
        if last["role"] == "assistant":
            tail = [{"role": "assistant", "content": list(last["content"])}]
            if extra:
                tail.append({"role": "user", "content": extra})
        else:
            content, n = last["content"], self._results_in_last
            merged = [*content[:n], *placeholders, *content[n:], *self._held]
            tail = [{"role": "user", "content": merged}]
        return [*self.turns[:-1], *tail]

    def _add_input(self, blocks: list[dict[str, Any]]) -> None:
        if self._in_flight:
            self._held.extend(blocks)
        else:
            for block in blocks:
                self._add("user", block)

    def _release(self) -> None:
        self._in_flight = False
        for block in self._held:
            self._add("user", block)
        self._held.clear()

    def _add_result(self, event: _ToolResult) -> None:
        if isinstance(event, UserCustomToolResultEvent):
            use_id = event.custom_tool_use_id
        elif isinstance(event, AgentMcpToolResultEvent):
            use_id = event.mcp_tool_use_id
        else:
            use_id = event.tool_use_id
        if use_id in self._open:
            del self._open[use_id]
            block = _result_block(use_id, event)
            self._add(
                "user", block if self.result_cap is None else fit_result(block, self.result_cap)
            )

    def _add(self, role: str, block: dict[str, Any]) -> None:
        self.blocks_built += 1
        self.weight += memory_weight(block)
        is_result = block.get("type") == "tool_result"
        if self.turns and self.turns[-1]["role"] == role:
            content = self.turns[-1]["content"]
            if is_result:
                content.insert(self._results_in_last, block)
                self._results_in_last += 1
            else:
                content.append(block)
            return
        self.turns.append({"role": role, "content": [block]})
        self.weight += TURN_BYTES
        self._results_in_last = 1 if is_result else 0


TURN_BYTES = 200
"""A turn's own dict and list, besides its blocks."""


def memory_weight(value: Any) -> int:
    """Roughly the bytes `value` (a block of JSON-like values, as parsed from the log) holds
    in CPython: its strings plus each container's own size (a parsed dict's keys are strings
    of their own). An estimate for budgeting a cache, within ~10 % on conversations of text
    and tool calls, cheap enough to take once per block as it is added."""
    if isinstance(value, str):
        return 50 + len(value)
    if isinstance(value, dict):
        return 240 + sum(60 + memory_weight(v) for v in value.values())
    if isinstance(value, list):
        return 60 + sum(8 + memory_weight(v) for v in value)
    return 32


def _input_blocks(event: UserMessageEvent | SystemMessageEvent) -> list[dict[str, Any]]:
    if isinstance(event, SystemMessageEvent):
        text = "\n".join(str(b.get("text", "")) for b in event.content)
        return [{"type": "text", "text": f"<system-message>{text}</system-message>"}]
    return [b for b in event.content if b.get("type") != "redacted"]


def _result_block(use_id: str, event: _ToolResult | None) -> dict[str, Any]:
    if event is None:
        return {
            "type": "tool_result",
            "tool_use_id": use_id,
            "is_error": True,
            "content": [{"type": "text", "text": _ABANDONED}],
        }
    content = [
        b
        for b in event.content or []
        if b.get("type") in ("text", "image", "document", "search_result")
    ]
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id, "content": content}
    if event.is_error:
        block["is_error"] = True
    return block
