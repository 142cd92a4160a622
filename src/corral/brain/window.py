"""Context-window arithmetic, pure: the token estimate, the meter `decide` reads, where a
compaction cuts, and the text a summariser is given. See docs/context.md.

The estimate is deliberately cheap and deterministic (no tokenizer): a JSON value costs one
token per three bytes of its compact UTF-8 serialisation, rounded up, and an image costs a flat
`IMAGE_TOKENS`. Three bytes per token over-counts English prose (about four) and matches dense
code and JSON, so the estimate errs on the side of compacting early. Real usage corrects it:
after each model response the meter learns how far the real request size (`input_tokens` +
cache reads + cache writes) was from its estimate of the messages, and adds that difference
(system prompt, tools, estimation error) to every later estimate.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    SessionStatusTerminatedEvent,
    SpanModelRequestEndEvent,
    SpanModelRequestStartEvent,
    SystemMessageEvent,
    UserCustomToolResultEvent,
    UserMessageEvent,
    UserToolResultEvent,
)

BYTES_PER_TOKEN = 3
IMAGE_TOKENS = 1600
"""An image is billed by its pixels (at most about 1,600 tokens), not by its base64 size."""
BLOCK_TOKENS = 8
"""Framing of one message or tool block (role, ids, type tags)."""
MAX_COMPACTIONS_IN_A_ROW = 3
"""Compactions without a model response in between before the turn ends with
`compaction_limit_reached_error`."""
TRUNCATION_NOTE = (
    "[Corral truncated this tool result to fit the model's context window: {kept} of about "
    "{total} tokens are shown. The full result stays in the session's event log.]"
)
SUMMARY_OPEN = (
    "<context-summary>\nThe earlier part of this conversation was compacted to fit the "
    "model's context window; this is a summary of it.\n"
)
SUMMARY_CLOSE = "\n</context-summary>"


def estimate_tokens(value: Any) -> int:
    """The documented estimate of `value` (a block, a message, a list of them, any JSON)."""
    if isinstance(value, list):
        return sum(estimate_tokens(item) for item in value)
    if isinstance(value, dict):
        if value.get("type") == "image":
            return IMAGE_TOKENS
        if "content" in value and isinstance(value["content"], list):
            rest = {k: v for k, v in value.items() if k != "content"}
            return _bytes_estimate(rest) + estimate_tokens(value["content"])
    return _bytes_estimate(value)


def _bytes_estimate(value: Any) -> int:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


def result_cap(window: int) -> int:
    """The most tokens one tool result may take in a request: a quarter of the window."""
    return window // 4


def summary_tokens(window: int) -> int:
    """`max_tokens` of a summary request: a tenth of the window, 256 to 8,192."""
    return max(256, min(8192, window // 10))


def keep_tokens(window: int) -> int:
    """How much of the newest conversation a compaction keeps verbatim (when it can)."""
    return window // 4


def fit_result(block: dict[str, Any], cap: int) -> dict[str, Any]:
    """A `tool_result` block whose content is at most about `cap` tokens: text is cut (with a
    note saying so), other blocks past the cap are dropped. Small blocks are returned as is."""
    content = block.get("content") or []
    total = estimate_tokens(content)
    if total <= cap:
        return block
    budget = max(cap - estimate_tokens(TRUNCATION_NOTE) - 16, 0)
    kept: list[dict[str, Any]] = []
    for item in content:
        cost = estimate_tokens(item)
        if cost <= budget:
            kept.append(item)
            budget -= cost
        elif item.get("type") == "text" and budget > 0:
            text = str(item.get("text", ""))
            kept.append({"type": "text", "text": _cut_text(text, budget * BYTES_PER_TOKEN)})
            budget = 0
    shown = estimate_tokens(kept)
    kept.append({"type": "text", "text": TRUNCATION_NOTE.format(kept=shown, total=total)})
    return {**block, "content": kept}


def _cut_text(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose JSON form fits `max_bytes` (never splitting a
    character)."""
    data = text.encode()[: max(max_bytes, 0)]
    cut = data.decode(errors="ignore")
    while cut and len(json.dumps(cut, ensure_ascii=False).encode()) > max_bytes:
        cut = cut[: max(len(cut) - max(len(cut) // 8, 1), 0)]
    return cut


def summary_text(summary: str) -> str:
    """How a summary appears to the model (the first block of the first message)."""
    return f"{SUMMARY_OPEN}{summary}{SUMMARY_CLOSE}"


@dataclass(slots=True)
class ContextMeter:
    """The estimated size of the next model request, folded from the log like the rest of
    the state. `limit`, `cap` and `overhead` come from configuration (the run sets them
    before folding); everything else is a function of the log."""

    limit: int | None = None
    """Compact when the next request is estimated above this (None: never)."""
    cap: int | None = None
    """The most tokens one tool result counts (it is truncated to this when sent)."""
    overhead: int = 0
    """Estimated system prompt and tools, until a response measures the real size."""
    messages: int = 0
    """Estimated tokens of the messages as the model sees them now."""
    correction: int | None = None
    """Real request size minus the estimate of its messages, from the last response."""
    compactions_in_a_row: int = 0
    """Compactions since the last model response or closed turn."""
    _at_start: int = 0

    @property
    def next_request(self) -> int:
        """Estimated tokens of the next request."""
        return self.messages + (self.overhead if self.correction is None else self.correction)

    @property
    def over(self) -> bool:
        """The next request would pass the compaction threshold."""
        return self.limit is not None and self.next_request > self.limit

    @property
    def exhausted(self) -> bool:
        """Compacting again would make no progress: the turn must stop instead."""
        return self.compactions_in_a_row >= MAX_COMPACTIONS_IN_A_ROW

    def apply(self, event: LogEvent) -> None:
        """Fold one event."""
        match event:
            case UserMessageEvent() | SystemMessageEvent():
                self.messages += estimate_tokens(event.content) + BLOCK_TOKENS
            case AgentMessageEvent():
                texts = [b for b in event.content if b.get("type") == "text"]
                self.messages += estimate_tokens(texts) + BLOCK_TOKENS
            case AgentToolUseEvent() | AgentCustomToolUseEvent() | AgentMcpToolUseEvent():
                self.messages += estimate_tokens([event.name, event.input]) + BLOCK_TOKENS
            case (
                AgentToolResultEvent()
                | UserToolResultEvent()
                | UserCustomToolResultEvent()
                | AgentMcpToolResultEvent()
            ):
                size = estimate_tokens(event.content or [])
                self.messages += min(size, self.cap or size) + BLOCK_TOKENS
            case SpanModelRequestStartEvent():
                self._at_start = self.messages
            case SpanModelRequestEndEvent() if not event.is_error:
                self.compactions_in_a_row = 0
                usage = event.model_usage
                real = sum(
                    int(usage.get(key, 0))
                    for key in (
                        "input_tokens",
                        "cache_read_input_tokens",
                        "cache_creation_input_tokens",
                    )
                )
                if real > 0:  # a provider that reports no usage teaches nothing
                    self.correction = max(real - self._at_start, 0)
            case ContextSummaryEvent():
                self.messages = event.tokens_after
                self.compactions_in_a_row += 1
            case SessionStatusIdleEvent() if event.stop_reason.type != "requires_action":
                self.compactions_in_a_row = 0
            case SessionStatusTerminatedEvent():
                self.compactions_in_a_row = 0
            case _:
                pass


def choose_cut(turns: Sequence[dict[str, Any]], keep: int, most: int) -> tuple[int, int] | None:
    """Where a compaction cuts: (index of the first turn kept, how many of that turn's first
    blocks go too), or None when nothing can be cut.

    A cut between turns is valid before a turn that is the assistant's, or the user's without
    tool results, when every tool use before it has its result before it. Of the valid cuts,
    the one keeping the most turns within `keep` estimated tokens; if none is that small, the
    one keeping the fewest. If even that tail is above `most`, everything is summarised: the
    last turn (the user's, all calls answered) keeps only the blocks that arrive after the
    cut was chosen (input logged during the summary request extends it).
    """
    count = len(turns)
    valid = [False] * count
    open_uses: set[str] = set()
    for index, turn in enumerate(turns):
        content = turn["content"]
        if index > 0 and not open_uses:
            valid[index] = turn["role"] == "assistant" or not any(
                b.get("type") == "tool_result" for b in content
            )
        for block in content:
            if block.get("type") == "tool_use":
                open_uses.add(str(block.get("id")))
            elif block.get("type") == "tool_result":
                open_uses.discard(str(block.get("tool_use_id")))
    best: int | None = None
    best_size = size = 0
    for index in range(count - 1, 0, -1):
        size += estimate_tokens(turns[index]) + BLOCK_TOKENS
        if not valid[index]:
            continue
        if best is None or size <= keep:
            best, best_size = index, size
        if size > keep:
            break
    if best is not None and best_size <= most:
        return best, 0
    last = turns[-1] if turns else None
    if last is not None and last["role"] == "user" and last["content"] and not open_uses:
        return count - 1, len(last["content"])
    return None if best is None else (best, 0)


def fit_text(text: str, max_tokens: int) -> str:
    """`text` if it is within `max_tokens` (estimated), else its start and end with a note
    of what was left out between them."""
    if _bytes_estimate(text) <= max_tokens:
        return text
    half = max(max_tokens * BYTES_PER_TOKEN // 2 - 64, 0)
    head = _cut_text(text, half)
    tail = _cut_text(text[::-1], half)[::-1]
    omitted = len(text) - len(head) - len(tail)
    return f"{head}\n[... {omitted} characters omitted to fit the context window ...]\n{tail}"


def render_for_summary(summary: str | None, turns: Sequence[dict[str, Any]]) -> str:
    """The conversation to be summarised as plain text: a summariser needs no tool
    definitions and no alternating turns, and any provider can read it."""
    lines: list[str] = []
    if summary:
        lines.append(f"[Summary of what came before]\n{summary}")
    for turn in turns:
        speaker = "User" if turn["role"] == "user" else "Assistant"
        for block in turn["content"]:
            lines.append(_render_block(speaker, block))
    return "\n\n".join(lines)


def _render_block(speaker: str, block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return f"{speaker}: {block.get('text', '')}"
    if kind == "tool_use":
        arguments = json.dumps(block.get("input"), ensure_ascii=False)
        return f"Assistant called tool {block.get('name')} (call {block.get('id')}): {arguments}"
    if kind == "tool_result":
        status = " (error)" if block.get("is_error") else ""
        inner = "\n".join(
            _render_block("", b).removeprefix(": ") for b in block.get("content") or []
        )
        return f"Result of call {block.get('tool_use_id')}{status}:\n{inner}"
    if kind == "image":
        return f"{speaker}: [an image]"
    if kind == "document":
        source = block.get("source") or {}
        if source.get("type") == "text":
            return f"{speaker}: [document {block.get('title') or ''}]\n{source.get('data', '')}"
        return f"{speaker}: [a document {block.get('title') or ''}]".rstrip()
    return f"{speaker}: {json.dumps(block, ensure_ascii=False)}"
