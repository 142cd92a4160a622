"""The pure core of multi-agent threads: what a child owes its parent (`apply_thread`),
when the coordinator's wait runs, and where a client event is routed (`route`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.brain import events as ev
from corral.brain.decide import CallModel, FinishTurn, Halt, HandleInterrupt, RunTool, decide
from corral.brain.state import SessionState, apply
from corral.brain.threads import Relay, threads_working, wait_empty
from corral.errors import BadRequest
from corral.service.threads import Target, route
from corral.session.threads import (
    START_TOOL,
    WAIT_TOOL,
    child_thread_id,
    derived_event_id,
    primary_thread_id,
    session_of_primary,
)
from corral.wire.events import parse_event
from tests.brain.logs import (
    Body,
    custom,
    fmt,
    folded,
    idle,
    interrupt,
    msg,
    running,
    said,
    span,
    span_end,
    use,
)

SESSION = "sesn_01abc"
CHILD = "sthr_child"


def role() -> Body:
    return ev.event(
        "corral.thread_role",
        parent_session_id=SESSION,
        parent_thread_id=primary_thread_id(SESSION),
        thread_id=CHILD,
        agent_name="alpha",
    )


def task(text: str = "do it") -> Body:
    return ev.event(
        "agent.thread_message_received",
        from_session_thread_id=primary_thread_id(SESSION),
        content=ev.text_content(text),
    )


def relayed(seq: int) -> Body:
    return ev.event("corral.relayed", seq=seq)


# ---- a child's outbox ------------------------------------------------------------------


def test_a_child_relays_its_statuses_and_its_reply_before_anything_else() -> None:
    log = [fmt(), role(), task(), running(), span("s"), said("done"), span_end("s"), idle()]
    state = folded(log)
    kinds = [o.body["type"] for o in state.thread.outbox]
    assert kinds == [
        "session.thread_status_running",
        "session.thread_status_idle",
        "agent.thread_message_received",
        "corral.thread_progress",
    ]
    reply = state.thread.outbox[-2]
    assert reply.body["content"] == ev.text_content("done")
    assert reply.body["from_session_thread_id"] == CHILD
    assert reply.sent is not None and reply.sent["to_session_thread_id"] == primary_thread_id(
        SESSION
    )
    assert decide(state) == Relay()


def test_cross_posts_keep_their_ids_and_replies_have_derived_ones() -> None:
    log = [fmt(), role(), task(), running(), idle()]
    state = folded(log)
    status, close, reply, progress = state.thread.outbox
    assert status.body["id"] == log[3]["id"] and close.body["id"] == log[4]["id"]
    assert reply.body["id"] == derived_event_id(log[4]["id"], "reply")
    assert progress.body["id"] == derived_event_id(log[4]["id"], "progress")
    # Folding the same log again (a new brain after a crash) owes exactly the same events.
    again = folded(log)
    assert [o.body for o in again.thread.outbox] == [o.body for o in state.thread.outbox]


def test_a_relayed_marker_clears_what_it_covers_only() -> None:
    log = [fmt(), role(), task(), running(), relayed(4), custom("c1")]
    state = folded(log)
    assert [o.body["type"] for o in state.thread.outbox] == ["agent.custom_tool_use"]
    assert state.thread.outbox[0].body["session_thread_id"] == CHILD


def test_only_calls_that_need_the_client_are_cross_posted() -> None:
    log = [fmt(), role(), task(), relayed(3), use("a"), use("b", "ask")]
    state = folded(log)
    assert [o.body["id"] for o in state.thread.outbox] == ["b"]


def test_a_turn_without_a_message_still_answers_the_coordinator() -> None:
    log = [fmt(), role(), task(), running(), interrupt(), idle()]
    state = folded(log)
    reply = state.thread.outbox[-2].body
    assert "without a message" in reply["content"][0]["text"]


def test_closing_a_thread_that_was_not_working_sends_no_reply() -> None:
    log = [fmt(), role(), task(), running(), said("x"), idle(), relayed(6), interrupt(), idle()]
    state = folded(log)
    kinds = [o.body["type"] for o in state.thread.outbox]
    assert kinds == ["session.thread_status_idle", "corral.thread_progress"]


def test_a_session_without_a_role_owes_nothing() -> None:
    state = folded([fmt(), msg(), running(), span("s"), said("hi"), span_end("s"), idle()])
    assert state.thread.outbox == [] and decide(state) == Halt()


def test_cross_posts_on_a_parent_log_are_not_its_own_calls() -> None:
    foreign = {**custom("c9"), "session_thread_id": CHILD}
    state = folded([fmt(), msg(), running(), foreign])
    assert state.unresolved() == []


def test_a_thread_archived_while_it_closed_a_turn_stays_terminated() -> None:
    ended = ev.event("session.status_terminated")
    log = [fmt(), role(), task(), running(), span("s"), said("x"), span_end("s"), task("more")]
    state = folded([*log, ended, idle()])  # the brain's idle lands after the archive's end
    assert state.status == "terminated"
    outbox = state.thread.outbox
    assert [o.body.get("final") for o in outbox if o.wake] == [None, True, False]
    assert decide(folded([*log, ended, idle(), relayed(10)])) == Halt()


# ---- the coordinator's wait ----------------------------------------------------------


def wait(call_id: str = "w") -> Body:
    return ev.event(
        "agent.tool_use", id=call_id, name=WAIT_TOOL, input={}, evaluated_permission="allow"
    )


def sent_to(thread_id: str = CHILD) -> Body:
    """The coordinator's record of a start's task or a send's message to `thread_id`."""
    return ev.event(
        "agent.thread_message_sent", to_session_thread_id=thread_id, content=ev.text_content("x")
    )


def reply_from(thread_id: str = CHILD) -> Body:
    return ev.event(
        "agent.thread_message_received",
        from_session_thread_id=thread_id,
        content=ev.text_content("reply"),
    )


def progress(answered: int, thread_id: str = CHILD, *, final: bool = False) -> Body:
    return ev.event("corral.thread_progress", thread_id=thread_id, answered=answered, final=final)


def crossposted_idle(thread_id: str = CHILD) -> Body:
    return {**idle(), "type": "session.thread_status_idle", "session_thread_id": thread_id}


def runs_wait(state: SessionState) -> bool:
    action = decide(state)
    return isinstance(action, RunTool) and action.call.name == WAIT_TOOL


def test_wait_halts_until_an_unseen_thread_message_arrives() -> None:
    log = [fmt(), msg(), running(), span("s"), sent_to(), wait(), span_end("s")]
    assert decide(folded(log)) == Halt()
    assert runs_wait(folded([*log, task("reply")]))


@pytest.mark.parametrize(
    "before",
    [
        pytest.param([], id="no thread started"),
        pytest.param([sent_to(), reply_from(), progress(1)], id="its one thread answered"),
        pytest.param([sent_to(), progress(0, final=True)], id="its thread terminated"),
        pytest.param(
            [sent_to(), sent_to("sthr_b"), reply_from(), progress(1), progress(1, "sthr_b")],
            id="both threads answered",
        ),
    ],
)
def test_a_wait_with_no_thread_working_answers_at_once(before: list[Body]) -> None:
    log = [fmt(), msg(), running(), *before, span("s"), wait(), span_end("s")]
    state = folded(log)
    assert runs_wait(state) and wait_empty(state, state.calls["w"])
    assert not threads_working(state)


@pytest.mark.parametrize(
    "before",
    [
        pytest.param([sent_to()], id="just started"),
        pytest.param([sent_to(), crossposted_idle()], id="its reply in flight"),
        pytest.param([sent_to(), reply_from(), progress(1), sent_to()], id="just sent a message"),
        pytest.param([sent_to(), sent_to(), reply_from(), progress(1)], id="a message unanswered"),
        pytest.param(
            [sent_to(), sent_to("sthr_b"), reply_from(), progress(1)], id="one of two working"
        ),
    ],
)
def test_a_wait_on_a_working_thread_halts(before: list[Body]) -> None:
    log = [fmt(), msg(), running(), *before, span("s"), wait(), span_end("s")]
    state = folded(log)
    assert threads_working(state) and decide(state) == Halt()


def test_a_wait_runs_after_the_calls_of_its_response() -> None:
    start = ev.event(
        "agent.tool_use",
        id="st",
        name=START_TOOL,
        input={"agent": "alpha", "task": "t"},
        evaluated_permission="allow",
    )
    log = [fmt(), msg(), running(), span("s"), wait(), start, span_end("s")]
    action = decide(folded(log))
    assert isinstance(action, RunTool) and action.call.name == START_TOOL


def test_a_child_reports_which_messages_it_answered() -> None:
    # A message logged after the model's last request started is not answered by that turn:
    # the thread runs another turn for it, so the coordinator must keep waiting.
    log = [fmt(), role(), task(), running(), span("s"), task("more"), said("x"), span_end("s")]
    state = folded([*log, idle()])
    assert state.thread.outbox[-1].body["answered"] == 1
    assert state.thread.outbox[-1].wake and not state.thread.outbox[-1].body["final"]
    interrupted = folded([fmt(), role(), task(), relayed(3), interrupt(), idle()])
    assert [o.body.get("answered") for o in interrupted.thread.outbox] == [None, 1]
    ended = folded([*log, ev.event("session.status_terminated")])
    assert ended.thread.outbox[-1].body["answered"] == 2 and ended.thread.outbox[-1].body["final"]


def test_a_message_that_arrived_while_the_model_answered_releases_the_wait() -> None:
    log = [fmt(), msg(), running(), span("s"), task("early"), wait(), span_end("s")]
    action = decide(folded(log))
    assert isinstance(action, RunTool) and action.call.name == WAIT_TOOL


def test_a_reply_to_an_idle_coordinator_starts_a_turn() -> None:
    log = [fmt(), msg(), running(), span("s"), said("bye"), span_end("s"), idle(), task("hi")]
    assert decide(folded(log)) == CallModel(0)


class Team:
    """A coordinator's log and its children's, driven step by step as the server would: each
    child's brain does what `decide` says (a model call and a turn close take two steps
    each, so a message can land while the model answers or just before the idle; a relay
    delivers one item per step, so the coordinator can look between the deliveries), and
    the coordinator logs each start or send only after delivering it (its
    `agent.thread_message_sent` can land after the reply it caused)."""

    def __init__(self, children: int) -> None:
        self.coord: list[Body] = [fmt(), msg(), running()]
        self.coord_state = folded(self.coord)
        self.posted: set[str] = set()
        self.kids = [f"sthr_{n}" for n in range(children)]
        self.logs: dict[str, list[Body]] = {k: [] for k in self.kids}
        self.states = {k: SessionState() for k in self.kids}
        self.in_flight: dict[str, str | None] = dict.fromkeys(self.kids)
        self.closing: set[str] = set()
        self.unlogged: list[Body] = []
        self.quiet = False
        """No thread was working when the coordinator last looked, and none was sent
        anything since: no reply may land now."""
        for kid in self.kids:
            self.append(kid, fmt(), self.role(kid), task())
            self.unlogged.append(sent_to(kid))
            self.log_sent()

    @staticmethod
    def role(kid: str) -> Body:
        return {**role(), "thread_id": kid}

    def append(self, kid: str, *bodies: Body) -> None:
        for body in bodies:
            self.logs[kid].append(body)
            apply(self.states[kid], len(self.logs[kid]), parse_event(body))

    def post(self, body: Body) -> None:
        if body["type"] == "agent.thread_message_received":
            assert not self.quiet, "a reply came after a wait was told nothing can come"
        self.coord.append(body)
        apply(self.coord_state, len(self.coord), parse_event(body))

    def log_sent(self) -> None:
        for body in self.unlogged:
            self.post(body)
        self.unlogged = []

    def send(self, kid: str) -> None:
        if not self.unlogged:  # the coordinator runs its calls one at a time
            self.append(kid, task("more"))
            self.unlogged.append(sent_to(kid))
            self.quiet = False

    def step(self, kid: str) -> bool:
        """One step of `kid`'s brain; False when it has nothing to do."""
        state = self.states[kid]
        if (start := self.in_flight[kid]) is not None:
            self.in_flight[kid] = None
            self.append(kid, said("r"), span_end(start))
            return True
        if kid in self.closing:
            self.closing.discard(kid)
            self.append(kid, idle())
            return True
        action = decide(state)
        if isinstance(action, Relay):
            item = next((o for o in state.thread.outbox if o.body["id"] not in self.posted), None)
            if item is not None:
                self.posted.add(item.body["id"])
                self.post({"processed_at": "2026-01-01T00:00:00Z", **item.body})
                return True
            sent = [
                {"processed_at": "2026-01-01T00:00:00Z", **o.sent}
                for o in state.thread.outbox
                if o.sent
            ]
            self.append(kid, *sent, relayed(state.thread.outbox[-1].seq))
            return True
        if isinstance(action, CallModel):
            start = f"s{len(self.logs[kid])}"
            self.append(kid, *([running()] if state.status != "running" else []), span(start))
            self.in_flight[kid] = start
            return True
        if isinstance(action, (FinishTurn, HandleInterrupt)):
            self.closing.add(kid)  # decided; the idle is appended by the next step
            return True
        assert action == Halt(), action
        return False

    def look(self) -> None:
        """The coordinator decides on a wait (only between its calls)."""
        if not self.unlogged:
            self.quiet = not threads_working(self.coord_state)

    def settle(self) -> None:
        self.log_sent()
        for _ in range(500):
            moved = [self.step(k) for k in self.kids]  # every thread takes its step
            if not any(moved):
                return
        raise AssertionError("the threads never settled")


STEPS = st.tuples(
    st.sampled_from(["step", "step", "step", "send", "log", "interrupt", "terminate"]),
    st.integers(0, 1),
)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2), st.lists(STEPS, max_size=60))
def test_a_wait_is_told_nothing_can_come_only_when_nothing_can(
    children: int, steps: list[tuple[str, int]]
) -> None:
    team = Team(children)
    for kind, n in steps:
        kid = team.kids[n % children]
        if kind == "step":
            team.step(kid)
        elif kind == "send":
            team.send(kid)
        elif kind == "log":
            team.log_sent()
        elif kind == "interrupt":
            team.append(kid, interrupt())
        elif team.states[kid].status != "terminated":
            team.append(kid, ev.event("session.status_terminated"))
        team.look()
    team.settle()  # no reply may land while quiet (checked on every post)
    assert not threads_working(team.coord_state), "settled threads are not working"
    replies = [e for e in team.coord if e["type"] == "agent.thread_message_received"]
    closes = [
        e for k in team.kids for e in team.logs[k] if e["type"] == "agent.thread_message_sent"
    ]
    assert len(replies) == len(closes), "every reply a thread logged reached the coordinator"


# ---- ids -----------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=40))
def test_ids_are_deterministic_and_primary_ids_invert(suffix: str) -> None:
    session_id = "sesn_" + suffix
    assert session_of_primary(primary_thread_id(session_id)) == session_id
    assert child_thread_id(suffix) == child_thread_id(suffix).strip()
    assert child_thread_id(suffix).startswith("sthr_")
    assert derived_event_id(suffix, "a") != derived_event_id(suffix, "b")


# ---- routing client events -------------------------------------------------------------

ANSWER = {"type": "user.custom_tool_result", "custom_tool_use_id": "u1"}
CONFIRM = {"type": "user.tool_confirmation", "tool_use_id": "u2", "result": "allow"}
OWN = Target(SESSION, False)


@pytest.mark.parametrize(
    ("body", "owners", "live", "expected"),
    [
        (ANSWER, {"u1": CHILD}, [CHILD], [Target(CHILD, True)]),
        (ANSWER, {}, [CHILD], [OWN]),
        (CONFIRM, {"u2": "sthr_b"}, [CHILD, "sthr_b"], [Target("sthr_b", True)]),
        ({"type": "user.message"}, {"u1": CHILD}, [CHILD], [OWN]),
        ({"type": "user.interrupt"}, {}, [], [OWN]),
        (
            {"type": "user.interrupt"},
            {},
            [CHILD, "sthr_b"],
            [OWN, Target(CHILD, True), Target("sthr_b", True)],
        ),
        (
            {"type": "user.interrupt", "session_thread_id": CHILD},
            {},
            [CHILD],
            [Target(CHILD, True)],
        ),
        (
            {"type": "user.interrupt", "session_thread_id": primary_thread_id(SESSION)},
            {},
            [CHILD],
            [OWN],
        ),
    ],
)
def test_route(
    body: dict[str, Any], owners: dict[str, str], live: list[str], expected: list[Target]
) -> None:
    assert route(SESSION, body, owners, live) == expected


def test_an_interrupt_for_an_unknown_or_archived_thread_is_refused() -> None:
    with pytest.raises(BadRequest):
        route(SESSION, {"type": "user.interrupt", "session_thread_id": "sthr_x"}, {}, [CHILD])


@given(
    st.lists(st.sampled_from(["sthr_a", "sthr_b", "sthr_c"]), unique=True),
    st.dictionaries(st.sampled_from(["u1", "u2", "u3"]), st.sampled_from(["sthr_a", "sthr_b"])),
    st.sampled_from(["u1", "u2", "u3", "u4"]),
)
def test_answers_go_to_exactly_the_log_holding_their_call(
    live: list[str], owners: dict[str, str], use_id: str
) -> None:
    body = {"type": "user.custom_tool_result", "custom_tool_use_id": use_id}
    targets = route(SESSION, body, owners, live)
    assert len(targets) == 1
    assert targets[0].session_id == owners.get(use_id, SESSION)
    assert targets[0].echo == (use_id in owners)


@given(st.lists(st.sampled_from(["sthr_a", "sthr_b", "sthr_c"]), unique=True))
def test_an_unaddressed_interrupt_reaches_every_live_thread_once(live: list[str]) -> None:
    targets = route(SESSION, {"type": "user.interrupt"}, {}, live)
    assert [t.session_id for t in targets] == [SESSION, *live]
