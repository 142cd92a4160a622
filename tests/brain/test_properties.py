"""`fold`/`decide` under every interleaving Hypothesis finds of client answers, interrupts,
new messages, model replies and crashes (a crash drops the rest of the action in flight; the
next brain starts from the log).

The brain's actions are modelled step by step as `actions.py` performs them: the appends
around each side effect, and the interrupt watch that cancels a running call. Properties:

- no tool call ever runs twice, and none runs (nor does the model) while an interrupt is
  pending;
- every tool use gets at most one result, and every started call one eventually;
- left alone, the brain always settles (Halt) with nothing owed to the model or client;
- the incrementally applied state and transcript equal the fold of the whole log, and every
  model request answers each tool use of an assistant turn in the next user turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.brain import events as ev
from corral.brain.actions import INTERRUPTED_BY_USER, INTERRUPTED_OUTCOME_UNKNOWN
from corral.brain.context import Transcript, build_messages
from corral.brain.decide import (
    CallModel,
    FinishTurn,
    Halt,
    HandleInterrupt,
    RefuseTool,
    RepairDangling,
    RequestAction,
    RunTool,
    decide,
)
from corral.brain.state import SessionState, ToolCall, apply
from corral.wire.events import parse_event
from tests.brain.logs import (
    Body,
    confirm,
    custom,
    custom_result,
    error,
    folded,
    idle,
    interrupt,
    msg,
    rescheduled,
    result,
    said,
    span,
    span_end,
    started,
    use,
)

MAX_RETRIES = 2
CLIENT_MOVES = ["message", "interrupt", "answer", "answer", "crash"]
Step = Callable[[], None]


class World:
    """One session: its log, a brain stepping through actions, and what really ran."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.log: list[Body] = []
        self.state = SessionState()
        self.transcript = Transcript()
        self.plan: list[Step] = []
        self.since = 0
        self.executed: Counter[str] = Counter()
        self.model_calls = 0
        self.ids = 0

    # -- the log ----------------------------------------------------------------------------

    def append(self, *bodies: Body, brain: bool = True) -> None:
        if brain and self.state.format_seq == 0:
            bodies = (ev.log_format(), *bodies)
        for body in bodies:
            self.log.append(body)
            event = parse_event(body)
            apply(self.state, len(self.log), event)
            self.transcript.apply(event)

    def new_id(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def interrupted(self) -> bool:
        """The watch's view: an interrupt logged after what `decide` saw."""
        return self.state.interrupt_seq > self.since

    def going_running(self) -> list[Body]:
        return [] if self.state.status == "running" else [ev.event("session.status_running")]

    # -- the brain --------------------------------------------------------------------------

    def brain_step(self) -> bool:
        """Perform the next step of the action in flight, or decide a new one; False on Halt."""
        if not self.plan:
            action = decide(self.state)
            if isinstance(action, Halt):
                return False
            if isinstance(action, (RunTool, CallModel)):
                assert not self.state.interrupt_pending, f"{action} with an interrupt pending"
            self.since = self.state.last_seq
            self.plan = self.steps_for(action)
        self.plan.pop(0)()
        return True

    def steps_for(self, action: Any) -> list[Step]:
        match action:
            case RunTool():
                return self.run_tool(action.call)
            case CallModel():
                return self.call_model(action.attempt)
            case RefuseTool():
                denial = result(action.call.event_id, "denied", is_error=True)
                running = self.going_running()
                return [lambda: self.append(*running, denial)]
            case RepairDangling():
                unknown = [
                    result(c.event_id, INTERRUPTED_OUTCOME_UNKNOWN, is_error=True)
                    for c in action.calls
                ]
                return [lambda: self.append(*unknown)]
            case RequestAction():
                return [lambda: self.append(idle("requires_action", *action.event_ids))]
            case HandleInterrupt() | FinishTurn():
                return [lambda: self.append(idle())]
        raise AssertionError(action)

    def run_tool(self, call: ToolCall) -> list[Step]:
        running, outcome = self.going_running(), [INTERRUPTED_BY_USER]

        def execute() -> None:
            if self.interrupted():
                return  # cancelled before it ran
            assert not self.state.interrupt_pending, "a tool ran with an interrupt pending"
            self.executed[call.event_id] += 1
            assert self.executed[call.event_id] == 1, f"{call.event_id} ran twice"
            outcome[0] = "ran"

        return [
            lambda: self.append(*running, started(call.event_id)),
            execute,
            lambda: self.append(result(call.event_id, outcome[0], is_error=outcome[0] != "ran")),
        ]

    def call_model(self, attempt: int) -> list[Step]:
        start_id = self.new_id("span")
        reply: list[Body] = []

        def backoff() -> None:
            if self.interrupted():
                self.plan.clear()

        def start() -> None:
            self.append(*self.going_running(), span(start_id))
            check_request(self.transcript.messages(), self.log)

        def stream() -> None:
            if self.interrupted():
                reply.append(span_end(start_id, is_error=True))
                return
            assert not self.state.interrupt_pending, "the model was called during an interrupt"
            self.model_calls += 1
            reply.extend(self.draw_reply(start_id, attempt))

        steps: list[Step] = [start, stream, lambda: self.append(*reply)]
        return [backoff, *steps] if attempt else steps

    def draw_reply(self, start_id: str, attempt: int) -> list[Body]:
        kind = self.data.draw(st.sampled_from(["text", "tools", "tools", "retryable", "fatal"]))
        failed = span_end(start_id, is_error=True)
        if kind == "fatal" or (kind == "retryable" and attempt >= MAX_RETRIES):
            return [failed, error("exhausted"), idle("retries_exhausted")]
        if kind == "retryable":
            return [failed, rescheduled(), error("retrying")]
        if kind == "text":
            return [said("answer"), span_end(start_id)]
        uses: list[Body] = []
        refusals: list[Body] = []
        for _ in range(self.data.draw(st.integers(1, 3))):
            call_id = self.new_id("u")
            what = self.data.draw(st.sampled_from(["allow", "ask", "custom", "unknown"]))
            if what == "custom":
                uses.append(custom(call_id))
            elif what == "unknown":
                uses.append(use(call_id, "deny", name="nope"))
                refusals.append(result(call_id, "not enabled", is_error=True))
            else:
                uses.append(use(call_id, what))
        return [*uses, span_end(start_id), *refusals]

    # -- the client -------------------------------------------------------------------------

    def client_move(self, move: str) -> None:
        if move == "message":
            self.append(msg(), brain=False)
        elif move == "interrupt":
            self.append(interrupt(), brain=False)
        elif move == "crash":
            self.plan.clear()
        else:
            self.answer()

    def answer(self) -> None:
        """Answer one open call the way the API allows (it validates against the log)."""
        owed = [
            c
            for c in self.state.open.values()
            if c.kind == "custom" or (c.permission == "ask" and c.confirmation is None)
        ]
        if not owed:
            return
        call = self.data.draw(st.sampled_from(owed))
        if call.kind == "custom":
            self.append(custom_result(call.event_id), brain=False)
        else:
            verdict = self.data.draw(st.sampled_from(["allow", "deny"]))
            self.append(confirm(call.event_id, verdict), brain=False)


def check_request(messages: list[dict[str, Any]], log: list[Body]) -> None:
    """The request equals the batch build of the log so far, ends with the user, and answers
    every tool use in the user turn right after it."""
    assert messages == build_messages(log)
    assert messages and messages[-1]["role"] == "user"
    for before, after in zip(messages, messages[1:], strict=False):
        uses = {b["id"] for b in before["content"] if b.get("type") == "tool_use"}
        answered = {b["tool_use_id"] for b in after["content"] if b.get("type") == "tool_result"}
        assert uses <= answered, (uses, answered)


def results_per_call(log: list[Body]) -> Counter[str]:
    return Counter(
        str(b.get("tool_use_id") or b.get("custom_tool_use_id"))
        for b in log
        if b["type"] in ("agent.tool_result", "user.custom_tool_result")
    )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_interleaving_keeps_the_brains_promises(data: st.DataObject) -> None:
    world = World(data)
    world.append(msg(), brain=False)
    moves = data.draw(st.lists(st.sampled_from(["brain"] * 5 + CLIENT_MOVES), max_size=80))
    for move in moves:
        if move == "brain":
            world.brain_step()
        else:
            world.client_move(move)
    for _ in range(500):  # left alone, the brain settles
        if not world.brain_step():
            break
    else:
        raise AssertionError("the brain never settled")

    state = world.state
    assert state == folded(world.log), "incremental state differs from the fold"
    assert world.transcript.messages() == build_messages(world.log)
    assert all(n == 1 for n in results_per_call(world.log).values())
    for call in state.calls.values():
        if call.started_seq is not None:
            assert call.result_seq is not None, f"{call.event_id} started, never answered"
        if world.executed[call.event_id]:
            assert call.started_seq is not None, "ran without a logged start"
    assert state.status != "running"
    owed = [c for c in state.open.values() if not c.awaiting_client]
    assert not owed, owed
    if not state.open:  # nobody owes an answer: nothing is left for the model either
        assert state.last_input_seq <= state.last_answer_seq


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_transcript_built_in_any_slices_equals_the_batch_build(data: st.DataObject) -> None:
    world = World(data)
    world.append(msg(), brain=False)
    for move in data.draw(st.lists(st.sampled_from(["brain"] * 4 + CLIENT_MOVES), max_size=40)):
        world.brain_step() if move == "brain" else world.client_move(move)
    cut = data.draw(st.integers(0, len(world.log)))
    transcript = Transcript()
    for body in world.log[:cut]:
        transcript.apply(parse_event(body))
    assert transcript.messages() == build_messages(world.log[:cut])
    for body in world.log[cut:]:
        transcript.apply(parse_event(body))
    assert transcript.messages() == build_messages(world.log)
