"""Build the model's request from the log and the pinned agent; a brain-side transform.

The log keeps every original event; what the model sees (merged turns, synthetic results for
abandoned calls) is derived here and never written back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corral.models.base import ModelRequest
from corral.tools.builtin import BUILTIN_TOOLS
from corral.tools.resolve import custom_tools, enabled_builtins

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
        "instructions at /workspace/skills/<name>/SKILL.md.\n" + "\n".join(lines) + "\n</skills>"
    )
    return f"{base}\n\n{section}" if base else section


def build_request(
    agent: dict[str, Any],
    events: Sequence[dict[str, Any]],
    *,
    model_name: str,
    skills: Sequence[tuple[str, str]] = (),
) -> ModelRequest:
    """The next model call for a session whose log is `events`."""
    return ModelRequest(
        model=model_name,
        system=system_prompt(agent, skills),
        messages=build_messages(events),
        tools=tool_definitions(agent),
    )


def build_messages(events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alternating user/assistant turns from the log."""
    turns: list[dict[str, Any]] = []
    open_uses: dict[str, bool] = {}
    for body in events:
        for role, block in _blocks(body, open_uses):
            _add(turns, role, block)
    _close_abandoned(turns, open_uses)
    return [_order_results_first(t) for t in turns]


def _blocks(body: dict[str, Any], open_uses: dict[str, bool]) -> list[tuple[str, dict[str, Any]]]:
    kind = body.get("type")
    if kind == "user.message":
        return [("user", b) for b in body.get("content", []) if b.get("type") != "redacted"]
    if kind == "system.message":
        text = "\n".join(b.get("text", "") for b in body.get("content", []))
        return [("user", {"type": "text", "text": f"<system-message>{text}</system-message>"})]
    if kind == "agent.message":
        return [("assistant", b) for b in body.get("content", []) if b.get("type") == "text"]
    if kind in ("agent.tool_use", "agent.custom_tool_use", "agent.mcp_tool_use"):
        open_uses[str(body["id"])] = True
        block = {
            "type": "tool_use",
            "id": body["id"],
            "name": body["name"],
            "input": body.get("input") or {},
        }
        return [("assistant", block)]
    use_id = (
        body.get("tool_use_id") or body.get("custom_tool_use_id") or body.get("mcp_tool_use_id")
    )
    if kind in (
        "agent.tool_result",
        "user.tool_result",
        "user.custom_tool_result",
        "agent.mcp_tool_result",
    ) and open_uses.pop(str(use_id), False):
        return [("user", _result_block(str(use_id), body))]
    if kind == "session.status_idle" and (body.get("stop_reason") or {}).get("type") != (
        "requires_action"
    ):
        return [("user", _result_block(u, None)) for u in list(open_uses) if open_uses.pop(u)]
    return []


def _result_block(use_id: str, body: dict[str, Any] | None) -> dict[str, Any]:
    if body is None:
        return {
            "type": "tool_result",
            "tool_use_id": use_id,
            "is_error": True,
            "content": [{"type": "text", "text": _ABANDONED}],
        }
    content = [
        b
        for b in body.get("content") or []
        if b.get("type") in ("text", "image", "document", "search_result")
    ]
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id, "content": content}
    if body.get("is_error"):
        block["is_error"] = True
    return block


def _add(turns: list[dict[str, Any]], role: str, block: dict[str, Any]) -> None:
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].append(block)
    else:
        turns.append({"role": role, "content": [block]})


def _close_abandoned(turns: list[dict[str, Any]], open_uses: dict[str, bool]) -> None:
    """Tool uses still open at the end get placeholder results so the request is valid."""
    for use_id in list(open_uses):
        _add(turns, "user", _result_block(use_id, None))


def _order_results_first(turn: dict[str, Any]) -> dict[str, Any]:
    if turn["role"] != "user":
        return turn
    results = [b for b in turn["content"] if b.get("type") == "tool_result"]
    others = [b for b in turn["content"] if b.get("type") != "tool_result"]
    return {"role": "user", "content": results + others}
