"""decide() for self-hosted sessions: built-in calls wait for the worker, a lost worker's
calls are answered once, permission policies still hold. Pure: logs in, actions out."""

from __future__ import annotations

from corral.brain import events as ev
from corral.brain.decide import AnswerLost, CallModel, RefuseTool, RequestAction, decide
from tests.brain.logs import Body, confirm, fmt, folded, msg, running, span, span_end, use

REMOTE = ev.event("corral.hands_remote")


def lost() -> Body:
    body: Body = ev.event("corral.worker_lost", work_id="work_1")
    return body


def user_result(call_id: str) -> Body:
    body: Body = ev.event(
        "user.tool_result", tool_use_id=call_id, content=ev.text_content("x"), is_error=True
    )
    return body


def turn(*calls: Body) -> list[Body]:
    """A session that logged hands_remote, then a message answered by `calls`."""
    return [REMOTE, msg(), fmt(), running(), span("s1"), *calls, span_end("s1")]


def test_a_remote_builtin_call_waits_for_the_worker_never_runs_here() -> None:
    assert decide(folded(turn(use("t1")))) == RequestAction(("t1",))


def test_the_same_call_on_a_cloud_session_runs_here() -> None:
    log = turn(use("t1"))[1:]
    assert type(decide(folded(log))).__name__ == "RunTool"


def test_ask_waits_and_a_confirmed_call_still_waits_for_the_worker() -> None:
    assert decide(folded(turn(use("t1", "ask")))) == RequestAction(("t1",))
    state = folded([*turn(use("t1", "ask")), confirm("t1")])
    assert decide(state) == RequestAction(("t1",))


def test_a_denied_call_is_refused_by_the_server_and_never_reaches_the_worker() -> None:
    state = folded([*turn(use("t1", "ask")), confirm("t1", "deny")])
    action = decide(state)
    assert isinstance(action, RefuseTool) and action.call.event_id == "t1"


def test_a_lost_worker_s_calls_are_answered_once_then_the_model_is_called() -> None:
    log = [*turn(use("t1"), use("t2", "ask")), lost()]
    action = decide(folded(log))
    assert isinstance(action, AnswerLost)
    assert [c.event_id for c in action.calls] == ["t1"]  # t2 was never released to a worker
    after = folded([*log, user_result("t1")])
    assert decide(after) == RequestAction(("t2",))


def test_calls_logged_after_the_loss_wait_for_the_next_worker() -> None:
    log = [*turn(use("t1")), lost(), user_result("t1"), span("s2"), use("t3"), span_end("s2")]
    assert decide(folded(log)) == RequestAction(("t3",))


def test_a_result_from_the_worker_asks_the_model_again() -> None:
    assert isinstance(decide(folded([*turn(use("t1")), user_result("t1")])), CallModel)
