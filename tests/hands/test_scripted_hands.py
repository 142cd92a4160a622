"""ScriptedHands: passes the functional conformance suite; scripting and simulated death."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from corral.errors import HandsError
from corral.hands.base import ToolOutput
from corral.hands.conformance import FUNCTIONAL, Check, run_check
from corral.hands.scripted import ScriptedHands
from tests.hands.conftest import make_recipe

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("check", FUNCTIONAL, ids=lambda c: c.__name__)
async def test_scripted_hands_conform(check: Check, tmp_path: Path) -> None:
    await run_check(check, lambda _root: ScriptedHands(), tmp_path)


async def test_handlers_script_tool_outputs(tmp_path: Path) -> None:
    async def slow_grep(tool_input: dict[str, object]) -> ToolOutput:
        return ToolOutput.text(f"scripted {tool_input['pattern']}")

    hands = ScriptedHands({"bash": lambda _: ToolOutput.text("boom", is_error=True),
                           "grep": slow_grep})  # fmt: skip
    sandbox = await hands.provision(make_recipe(tmp_path))
    out = await sandbox.execute("bash", {"command": "anything"})
    assert out == ToolOutput.text("boom", is_error=True)
    assert await sandbox.execute("grep", {"pattern": "x"}) == ToolOutput.text("scripted x")
    assert sandbox.calls == [("bash", {"command": "anything"}), ("grep", {"pattern": "x"})]
    await hands.aclose()


async def test_kill_fails_the_running_call_and_later_ones(tmp_path: Path) -> None:
    hands = ScriptedHands()
    sandbox = await hands.provision(make_recipe(tmp_path))
    async with anyio.create_task_group() as tg:
        tg.start_soon(_kill_soon, sandbox)
        with pytest.raises(HandsError) as caught:
            await sandbox.execute("bash", {"command": "sleep 30"})
    assert caught.value.code == "sandbox_died" and caught.value.retryable
    assert not sandbox.alive
    with pytest.raises(HandsError):
        await sandbox.execute("read", {"file_path": "x"})
    fresh = await hands.provision(make_recipe(tmp_path))
    assert (await fresh.execute("bash", {"command": "echo ok"})).content[0]["text"] == "ok"
    await hands.aclose()


async def _kill_soon(sandbox: object) -> None:
    await anyio.sleep(0.2)
    sandbox.kill()  # type: ignore[attr-defined]
