"""The brain in-process on a real SQLite store, with scripted hands (`ScriptedHands` behind the
real `SandboxPool`) and a scripted model whose calls the test can hold open."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from corral.brain.actions import INTERRUPTED_BY_USER, INTERRUPTED_OUTCOME_UNKNOWN, act
from corral.brain.context import build_messages
from corral.brain.decide import CallModel, HandleInterrupt, decide
from corral.brain.loop import drive
from corral.brain.run import BrainDeps, BrainSettings, Run
from corral.brain.state import fold
from corral.hands.base import SandboxRecipe, ToolOutput
from corral.hands.pool import SandboxPool
from corral.hands.scripted import Handler, ScriptedHands
from corral.ids import new_id
from corral.models.base import (
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
)
from corral.session.log import EventQuery, Fence, StoredEvent
from corral.store.base import SessionRow
from corral.store.sqlite import SqliteStore
from corral.tools.resolve import resolve_tools
from corral.wire.agents import AgentToolset
from tests.brain.logs import interrupt, msg

pytestmark = pytest.mark.anyio

Reply = ModelResponse | ModelError


def text(words: str) -> ModelResponse:
    return ModelResponse(content=[{"type": "text", "text": words}], stop_reason="end_turn")


def bash(*commands: str) -> ModelResponse:
    uses = [
        {"type": "tool_use", "id": f"toolu_{i}", "name": "bash", "input": {"command": c}}
        for i, c in enumerate(commands)
    ]
    return ModelResponse(content=uses, stop_reason="tool_use")


class ScriptedReplies:
    """A model directory with one model that answers `replies` in order."""

    def __init__(self, *replies: Reply) -> None:
        self.replies = list(replies)
        self.requests: list[ModelRequest] = []

    def client_for(self, model: str) -> ModelClient:
        return self  # type: ignore[return-value]

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        self.requests.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, ModelError):
            raise reply
        yield reply

    async def aclose(self) -> None:
        pass


class Tools:
    """Bash handlers that count calls and can be held open until the test lets them go."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.entered = anyio.Event()
        self.hold = False

    async def bash(self, tool_input: dict[str, Any]) -> ToolOutput:
        self.calls.append(str(tool_input["command"]))
        self.entered.set()
        if self.hold:
            await anyio.sleep_forever()
        return ToolOutput.text(f"ran {tool_input['command']}")


class _Hold:
    def release(self) -> None:
        pass


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "corral.db")
    await store.open()
    yield store
    await store.aclose()


def sandbox_pool(tmp_path: Path, handlers: dict[str, Handler]) -> SandboxPool:
    async def recipe(session_id: str) -> SandboxRecipe:
        root = tmp_path / "sessions" / session_id
        return SandboxRecipe(session_id=session_id, workspace=root / "ws", outputs=root / "out")

    async def standings(ids: Any) -> dict[str, str | None]:
        return dict.fromkeys(ids, "v1")

    async def hold(session_id: str) -> _Hold:
        return _Hold()

    async def purge(session_id: str) -> bool:
        return True

    return SandboxPool(
        ScriptedHands(handlers),
        recipe,
        standings=standings,
        hold=hold,
        purge=purge,
        idle_seconds=600,
    )


Setup = Callable[..., Awaitable[tuple[BrainDeps, str]]]


@pytest.fixture
def setup(store: SqliteStore, tmp_path: Path) -> Setup:
    async def make(
        model: ScriptedReplies, tools: Tools | None = None, **settings: Any
    ) -> tuple[BrainDeps, str]:
        toolset = resolve_tools([AgentToolset(type="agent_toolset_20260401")], [])
        agent = {"model": {"id": "scripted"}, "system": "You help.", "tools": toolset}
        row = SessionRow(
            id=new_id("sesn"),
            created_at="2025-01-01T00:00:00.000000Z",
            environment_id="env_test",
            agent_id="agent_test",
            agent_version=1,
            body={"agent": agent},
        )
        await store.create_session(row, [msg("go")])
        handlers: dict[str, Handler] = {"bash": (tools or Tools()).bash}
        deps = BrainDeps(
            store=store,
            models=model,
            sandboxes=sandbox_pool(tmp_path, handlers),
            settings=BrainSettings(lease_seconds=30, **settings),
        )
        return deps, row.id

    return make


async def claim(deps: BrainDeps) -> Fence:
    fence = await deps.store.claim("brain-1", 30)
    assert fence is not None
    return fence


async def drive_once(deps: BrainDeps) -> bool:
    """Claim, drive and release, as a scheduler slot does."""
    fence = await claim(deps)
    try:
        return await drive(deps, fence)
    finally:
        await deps.store.release(fence)


async def log_of(deps: BrainDeps, session_id: str) -> list[StoredEvent]:
    return await deps.store.read(session_id, EventQuery(internal=True))


async def wait_for(deps: BrainDeps, session_id: str, kind: str) -> None:
    with anyio.fail_after(10):
        while not any(e.type == kind for e in await log_of(deps, session_id)):
            await anyio.sleep(0.01)


async def test_a_turn_with_a_tool_marks_its_start_and_folds_incrementally(setup: Setup) -> None:
    tools = Tools()
    model = ScriptedReplies(bash("echo a"), text("done"))
    deps, sid = await setup(model, tools)
    assert await drive(deps, await claim(deps))
    log = await log_of(deps, sid)
    assert [e.type for e in log] == [
        "user.message",
        "corral.log_format",
        "session.status_running",
        "span.model_request_start",
        "agent.tool_use",
        "span.model_request_end",
        "session.usage",
        "corral.tool_started",
        "agent.tool_result",
        "span.model_request_start",
        "agent.message",
        "span.model_request_end",
        "session.usage",
        "session.status_idle",
    ]
    assert tools.calls == ["echo a"]
    assert [e.type for e in await deps.store.read(sid, EventQuery())] == [
        e.type for e in log if not e.type.startswith("corral.")
    ]
    kept = deps.memo.take(sid)
    assert kept is not None
    assert kept.state == fold((e.seq, e.body) for e in log)
    assert kept.transcript.messages() == build_messages(e.body for e in log)
    assert model.requests[-1].messages[-1]["content"][0]["type"] == "tool_result"


async def test_an_interrupt_just_before_the_span_start_stops_the_model_call(
    setup: Setup,
) -> None:
    model = ScriptedReplies(text("must not be asked"))
    deps, sid = await setup(model)
    fence = await claim(deps)
    session = await deps.store.get_session(sid)
    assert session is not None
    run = Run(deps, fence, session)
    action = decide(await run.refresh())
    assert action == CallModel(0)
    await deps.store.append(sid, [interrupt()], wake=True)  # lands before our span start
    await act(run, action)
    assert model.requests == []
    assert isinstance(decide(await run.refresh()), HandleInterrupt)


async def test_an_interrupt_stops_the_running_tool_and_the_rest_of_the_batch(
    setup: Setup,
) -> None:
    tools = Tools()
    tools.hold = True
    model = ScriptedReplies(bash("first", "second"), text("must not be asked"))
    deps, sid = await setup(model, tools)
    async with anyio.create_task_group() as tg:
        tg.start_soon(drive, deps, await claim(deps))
        await tools.entered.wait()
        await deps.store.append(sid, [interrupt()], wake=True)
    assert tools.calls == ["first"]
    assert len(model.requests) == 1
    log = [e.body for e in await log_of(deps, sid)]
    results = [b for b in log if b["type"] == "agent.tool_result"]
    assert [r["content"][0]["text"] for r in results] == [INTERRUPTED_BY_USER]
    assert log[-1]["type"] == "session.status_idle"
    assert log[-1]["stop_reason"]["type"] == "end_turn"


async def test_a_crash_mid_tool_is_reported_after_restart_never_rerun(setup: Setup) -> None:
    tools = Tools()
    tools.hold = True
    model = ScriptedReplies(bash("side effect"), text("noted"))
    deps, sid = await setup(model, tools)
    fence = await claim(deps)
    async with anyio.create_task_group() as tg:
        tg.start_soon(drive, deps, fence)
        await tools.entered.wait()
        tg.cancel_scope.cancel()  # the brain dies mid-call: nothing more is appended
    assert [e.type for e in await log_of(deps, sid)][-1] == "corral.tool_started"
    await deps.store.release(fence)
    await deps.store.wake(sid)
    tools.hold = False
    assert await drive(deps, await claim(deps))
    assert tools.calls == ["side effect"]
    log = [e.body for e in await log_of(deps, sid)]
    (result,) = [b for b in log if b["type"] == "agent.tool_result"]
    assert result["is_error"] and result["content"][0]["text"] == INTERRUPTED_OUTCOME_UNKNOWN
    assert log[-1]["stop_reason"]["type"] == "end_turn"


async def test_the_next_turn_applies_only_new_events(setup: Setup) -> None:
    model = ScriptedReplies(text("one"), text("two"))
    deps, sid = await setup(model)
    assert await drive_once(deps)
    before = deps.stats.snapshot()
    await deps.store.append(sid, [msg("again")], wake=True)
    assert await drive_once(deps)
    after = deps.stats.snapshot()
    new = len(await log_of(deps, sid)) - 8  # the first turn, with its session.usage
    assert after["events_applied"] - before["events_applied"] == new == 7
    assert after["cold_folds"] == before["cold_folds"] == 1
    assert len(model.requests[-1].messages) == 3


async def test_a_retryable_failure_is_retried_as_a_new_request(setup: Setup) -> None:
    busy = ModelError("overloaded", "busy", retryable=True)
    model = ScriptedReplies(busy, text("finally"))
    deps, sid = await setup(model, retry_base_seconds=0.01)
    assert await drive(deps, await claim(deps))
    types = [e.type for e in await log_of(deps, sid)]
    assert types.count("span.model_request_start") == 2
    assert types[4:] == [
        "span.model_request_end",
        "session.status_rescheduled",
        "session.error",
        "session.status_running",
        "span.model_request_start",
        "agent.message",
        "span.model_request_end",
        "session.usage",
        "session.status_idle",
    ]
    assert len(model.requests) == 2


async def test_an_interrupt_during_the_backoff_cancels_the_retry(setup: Setup) -> None:
    busy = ModelError("overloaded", "busy", retryable=True)
    model = ScriptedReplies(busy, text("must not be asked"))
    deps, sid = await setup(model, retry_base_seconds=60)
    async with anyio.create_task_group() as tg:
        tg.start_soon(drive, deps, await claim(deps))
        await wait_for(deps, sid, "session.error")
        await deps.store.append(sid, [interrupt()], wake=True)
    log = [e.body for e in await log_of(deps, sid)]
    assert len(model.requests) == 1
    assert log[-1]["type"] == "session.status_idle"
    assert log[-1]["stop_reason"]["type"] == "end_turn"
