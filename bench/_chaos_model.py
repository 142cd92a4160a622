"""The chaos run's model: per-session, per-turn multi-step scripts served by the wire fake.

A step's reply is a pure function of (session marker, turn, step), read from the request, so
a brain that re-asks after a crash gets the same tool-use markers; two brains both executing
one of them is then visible in the session's executed.log. No HTTP or corral imports here.
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Any

import _util  # noqa: F401  (puts the repo root on sys.path for `tests.*`)
from tests.fakes.model_script import ErrorReply, Reply, Text, ToolUse, Turn

TAG = re.compile(r"\[(chx[0-9a-f]+) turn=(\d+)\]")
BASH_MARK = re.compile(r"echo (chx[0-9a-f]+\.t\d+\.s\d+\.b) >>")
EXECUTED_LOG = "/workspace/executed.log"
LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look up a key",
    "input_schema": {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
    },
}
TOOLS: list[dict[str, Any]] = [{"type": "agent_toolset_20260401"}, LOOKUP]
FILLER = "The quick brown fox checks the runbook before touching production. "


def user_text(marker: str, turn: int) -> str:
    """The user message that opens `turn` of a session (carries the marker the fake reads)."""
    return f"[{marker} turn={turn}] Follow the plan for this turn."


def bash_command(mark: str, slow: bool) -> str:
    """A side effect that records each execution (twice = a violation)."""
    if slow:  # long enough for a kill or pause to land before, during or after the echo
        return f"sleep 0.2; echo {mark} >> {EXECUTED_LOG}; sleep 1"
    return f"echo {mark} >> {EXECUTED_LOG}"


def plan(marker: str, turn: int) -> list[Turn]:
    """The replies of one turn: 2-4 tool steps, then a final text (end_turn)."""
    rng = random.Random(f"{marker}/{turn}")
    steps: list[Turn] = []
    for step in range(rng.randint(2, 4)):
        mark = f"{marker}.t{turn}.s{step}"
        kind = rng.choice(("bash", "bash_slow", "bash_slow", "custom", "both"))
        blocks: list[Text | ToolUse] = [Text(f"Step {step}: {FILLER}")]
        if kind in ("bash", "bash_slow", "both"):
            command = bash_command(f"{mark}.b", kind == "bash_slow")
            blocks.append(ToolUse("bash", {"command": command}))
        if kind in ("custom", "both"):
            blocks.append(ToolUse("lookup", {"key": f"{mark}.c"}))
        steps.append(Turn(blocks))
    steps.append(Turn([Text(f"Done with turn {turn}. {FILLER * 2}")]))
    return steps


def position(request: dict[str, Any]) -> tuple[str, int, int] | None:
    """(marker, turn, step) of a Messages request: the last tagged user message opens the
    turn, and each assistant message after it is one step taken."""
    messages = request.get("messages") or []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") != "user":
            continue
        match = TAG.search(_text_of(message.get("content")))
        if match:
            step = sum(1 for m in messages[index + 1 :] if m.get("role") == "assistant")
            return match.group(1), int(match.group(2)), step
    return None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


class ChaosModel:
    """The fake's handler: the scripted step with a random first-token delay, so kills land
    mid-stream as well as between streams."""

    def __init__(self, *, max_delay: float = 0.4, seed: int = 0) -> None:
        self.max_delay = max_delay
        self._rng = random.Random(seed)
        self.calls = 0

    def __call__(self, request: dict[str, Any]) -> Reply:
        where = position(request)
        if where is None:
            return ErrorReply(status=400, message="chaos fake: no [marker turn=N] tag")
        marker, turn, step = where
        steps = plan(marker, turn)
        self.calls += 1
        delay = self._rng.uniform(0.0, self.max_delay)
        reply = steps[min(step, len(steps) - 1)]
        return dataclasses.replace(reply, first_token_delay=delay, chunk_delay=0.005)
