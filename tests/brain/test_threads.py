"""The pure core of multi-agent threads: what a child owes its parent (`apply_thread`),
when the coordinator's wait runs, and where a client event is routed (`route`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.brain import events as ev
from corral.brain.decide import CallModel, Halt, RunTool, decide
from corral.brain.threads import Relay
from corral.errors import BadRequest
from corral.service.threads import Target, route
from corral.session.threads import (
    WAIT_TOOL,
    child_thread_id,
    derived_event_id,
    primary_thread_id,
    session_of_primary,
)
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
    ]
    reply = state.thread.outbox[-1]
    assert reply.body["content"] == ev.text_content("done")
    assert reply.body["from_session_thread_id"] == CHILD
    assert reply.sent is not None and reply.sent["to_session_thread_id"] == primary_thread_id(
        SESSION
    )
    assert decide(state) == Relay()


def test_cross_posts_keep_their_ids_and_replies_have_derived_ones() -> None:
    log = [fmt(), role(), task(), running(), idle()]
    state = folded(log)
    status, close, reply = state.thread.outbox
    assert status.body["id"] == log[3]["id"] and close.body["id"] == log[4]["id"]
    assert reply.body["id"] == derived_event_id(log[4]["id"], "reply")
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
    reply = state.thread.outbox[-1].body
    assert "without a message" in reply["content"][0]["text"]


def test_closing_a_thread_that_was_not_working_sends_no_reply() -> None:
    log = [fmt(), role(), task(), running(), said("x"), idle(), relayed(6), interrupt(), idle()]
    state = folded(log)
    assert [o.body["type"] for o in state.thread.outbox] == ["session.thread_status_idle"]


def test_a_session_without_a_role_owes_nothing() -> None:
    state = folded([fmt(), msg(), running(), span("s"), said("hi"), span_end("s"), idle()])
    assert state.thread.outbox == [] and decide(state) == Halt()


def test_cross_posts_on_a_parent_log_are_not_its_own_calls() -> None:
    foreign = {**custom("c9"), "session_thread_id": CHILD}
    state = folded([fmt(), msg(), running(), foreign])
    assert state.unresolved() == []


# ---- the coordinator's wait ----------------------------------------------------------


def wait(call_id: str = "w") -> Body:
    return ev.event(
        "agent.tool_use", id=call_id, name=WAIT_TOOL, input={}, evaluated_permission="allow"
    )


def test_wait_halts_until_an_unseen_thread_message_arrives() -> None:
    log = [fmt(), msg(), running(), span("s"), wait(), span_end("s")]
    assert decide(folded(log)) == Halt()
    state = folded([*log, task("reply")])
    action = decide(state)
    assert isinstance(action, RunTool) and action.call.name == WAIT_TOOL


def test_a_message_that_arrived_while_the_model_answered_releases_the_wait() -> None:
    log = [fmt(), msg(), running(), span("s"), task("early"), wait(), span_end("s")]
    action = decide(folded(log))
    assert isinstance(action, RunTool) and action.call.name == WAIT_TOOL


def test_a_reply_to_an_idle_coordinator_starts_a_turn() -> None:
    log = [fmt(), msg(), running(), span("s"), said("bye"), span_end("s"), idle(), task("hi")]
    assert decide(folded(log)) == CallModel(0)


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
