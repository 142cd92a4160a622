"""A new tool family is one class given to the brain (issue 20): a `clock` tool is offered,
logged, started and answered without a line of the brain changing, with the same at-most-once
start marker every server-side call has."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from corral.brain import events as ev
from corral.brain.loop import drive
from corral.brain.run import Run
from corral.brain.state import ToolCall
from corral.brain.tool_provider import ToolProvider
from corral.models.base import ModelResponse
from tests.brain.test_run import ScriptedReplies, Setup, claim, log_of, setup, store, text  # noqa: F401  (fixtures)

pytestmark = pytest.mark.anyio

NOW = "2026-12-04T12:00:00Z"


class Clock:
    """Tells the time: the whole family."""

    def __init__(self) -> None:
        self.calls = 0

    def definitions(self, agent: dict[str, Any]) -> list[dict[str, Any]]:
        schema = {"type": "object", "properties": {}}
        return [{"name": "clock", "description": "The current time.", "input_schema": schema}]

    def use_event(self, agent: dict[str, Any], name: str, tool_input: Any) -> dict[str, Any] | None:
        if name != "clock":
            return None
        tool_input = dict(tool_input or {})
        return ev.event("agent.tool_use", name=name, input=tool_input, evaluated_permission="allow")

    def owns(self, call: ToolCall) -> bool:
        return call.kind == "builtin" and call.name == "clock"

    async def run(self, run: Run, call: ToolCall, running: list[dict[str, Any]]) -> None:
        await run.append(*running, ev.tool_started(call.event_id))
        self.calls += 1
        await run.append(ev.tool_result(call.event_id, ev.text_content(NOW), is_error=False))


def asks_the_time() -> ModelResponse:
    use = {"type": "tool_use", "id": "toolu_clock", "name": "clock", "input": {}}
    return ModelResponse(content=[use], stop_reason="tool_use")


async def test_a_clock_family_is_offered_logged_and_run(setup: Setup) -> None:  # noqa: F811  (the fixture imported above)
    clock = Clock()
    family: ToolProvider[Run] = clock
    model = ScriptedReplies(asks_the_time(), text("It is noon."))
    deps, sid = await setup(model)
    deps = replace(deps, tools=(family,))
    assert await drive(deps, await claim(deps))
    offered = [tool["name"] for tool in model.requests[0].tools]
    assert "clock" in offered and "bash" in offered
    log = await log_of(deps, sid)
    types = [e.type for e in log]
    use = next(e for e in log if e.type == "agent.tool_use")
    assert use.body["name"] == "clock" and use.body["evaluated_permission"] == "allow"
    result = next(e for e in log if e.type == "agent.tool_result")
    assert result.body["tool_use_id"] == use.body["id"]
    assert result.body["content"] == [{"type": "text", "text": NOW}]
    assert types.index("corral.tool_started") < types.index("agent.tool_result")
    assert clock.calls == 1
    # The model saw the result in its next request.
    follow_up = model.requests[1].messages[-1]["content"]
    assert any(block.get("type") == "tool_result" for block in follow_up)
    assert types[-1] == "session.status_idle"


async def test_without_the_family_the_name_is_refused_as_not_enabled(setup: Setup) -> None:  # noqa: F811  (the fixture imported above)
    model = ScriptedReplies(asks_the_time(), text("No clock."))
    deps, sid = await setup(model)
    assert await drive(deps, await claim(deps))
    log = await log_of(deps, sid)
    use = next(e for e in log if e.type == "agent.tool_use")
    assert use.body["evaluated_permission"] == "deny"
    assert "clock" not in [tool["name"] for tool in model.requests[0].tools]
