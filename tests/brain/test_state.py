"""`apply`/`fold`, the transcript and the event union, on hand-written logs."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from corral.brain.context import Transcript, build_messages
from corral.brain.state import SessionState, apply
from corral.wire.events import INTERNAL_EVENT_TYPES, LogEvent, LogEventType, parse_event
from tests.brain.logs import (
    confirm,
    custom,
    custom_result,
    error,
    fmt,
    folded,
    idle,
    interrupt,
    msg,
    result,
    running,
    said,
    span,
    span_end,
    started,
    use,
)


def test_fold_is_apply_event_by_event() -> None:
    log = [msg(), fmt(), running(), span("s1"), use("a"), span_end("s1"), started("a")]
    state = SessionState()
    for seq, body in enumerate(log, start=1):
        apply(state, seq, parse_event(body))
    assert state == folded(log)


def test_calls_move_from_open_to_resolved() -> None:
    state = folded([msg(), fmt(), use("a"), custom("c"), started("a"), result("a")])
    assert list(state.open) == ["c"] and set(state.calls) == {"a", "c"}
    a = state.calls["a"]
    assert (a.started_seq, a.result_seq, a.legacy) == (5, 6, False)
    assert state.last_input_seq == 6


def test_a_closed_turn_abandons_open_calls_but_requires_action_does_not() -> None:
    waiting = folded([msg(), fmt(), custom("c"), idle("requires_action", "c")])
    assert waiting.waiting_on == ("c",) and "c" in waiting.open
    closed = folded([msg(), fmt(), custom("c"), idle("requires_action", "c"), interrupt(), idle()])
    assert not closed.open and closed.calls["c"].abandoned and not closed.interrupt_pending


def test_a_response_answers_what_preceded_its_request() -> None:
    state = folded([msg("1"), running(), span("s1"), msg("2"), said("x"), span_end("s1")])
    assert (state.last_answer_seq, state.last_input_seq) == (3, 4)
    failed = folded([msg("1"), running(), span("s1"), span_end("s1", is_error=True)])
    assert failed.last_answer_seq == 0


def test_interrupt_drops_earlier_input_and_results_after_it_ask_nothing() -> None:
    log = [msg(), fmt(), use("a"), started("a"), interrupt(), result("a"), msg("next")]
    state = folded(log)
    assert state.interrupt_pending
    assert state.last_answer_seq == 5 and state.last_input_seq == 7


def test_exhausted_error_drops_the_turn_and_resets_retries() -> None:
    state = folded([msg(), error("retrying"), error("retrying")])
    assert state.model_retries == 2 and state.last_input_seq > state.last_answer_seq
    state = folded([msg(), error("retrying"), error("exhausted"), idle("retries_exhausted")])
    assert state.model_retries == 0 and state.last_answer_seq == 3


def test_the_retry_bound_runs_from_the_first_failure_in_a_row() -> None:
    first, second = error("retrying"), error("retrying")
    first["processed_at"], second["processed_at"] = "2026-12-02T00:00:00Z", "2026-12-02T00:01:00Z"
    assert folded([msg(), first, second]).retry_since == "2026-12-02T00:00:00Z"
    ended = [msg(), span("s"), first, span("t"), span_end("t")]
    assert folded(ended).retry_since is None  # a call succeeded: the next failure starts anew
    assert folded([msg(), first, error("exhausted")]).retry_since is None
    assert folded([msg(), first, idle("end_turn")]).retry_since is None


def test_only_the_first_confirmation_and_result_count() -> None:
    state = folded([fmt(), use("a", "ask"), confirm("a", "deny"), confirm("a", "allow")])
    assert state.calls["a"].confirmation == "deny"
    state = folded([fmt(), use("a"), result("a", "one"), result("a", "two")])
    assert state.calls["a"].result_seq == 3


def test_malformed_events_are_refused_loudly() -> None:
    with pytest.raises(ValidationError):
        parse_event({"id": "x", "type": "agent.tool_usee", "name": "bash"})
    with pytest.raises(ValidationError):
        parse_event({"id": "x", "type": "user.tool_confirmation", "tool_use_id": "a"})


def test_every_event_type_has_one_class_and_internal_types_are_events() -> None:
    members = typing.get_args(typing.get_args(LogEvent)[0])
    tags = [typing.get_args(m.model_fields["type"].annotation)[0] for m in members]
    assert sorted(tags) == sorted(typing.get_args(LogEventType))
    assert set(INTERNAL_EVENT_TYPES) <= set(tags)


# ---- transcript -----------------------------------------------------------------------------


def test_results_come_first_in_a_user_turn() -> None:
    log = [msg("q"), use("a"), use("b"), msg("meanwhile"), result("b"), result("a")]
    messages = build_messages(log)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    blocks = messages[2]["content"]
    assert [b.get("tool_use_id") or b.get("text") for b in blocks] == ["b", "a", "meanwhile"]


def test_open_calls_get_placeholders_and_closed_turns_abandon_them() -> None:
    transcript = Transcript()
    for body in [msg("q"), use("a")]:
        transcript.apply(parse_event(body))
    request = transcript.messages()
    assert request[-1]["role"] == "user" and request[-1]["content"][0]["is_error"] is True
    assert [m["role"] for m in transcript.turns] == ["user", "assistant"], "view, not state"
    transcript.apply(parse_event(idle()))
    transcript.apply(parse_event(result("a")))  # too late: the turn closed
    assert len(transcript.turns[-1]["content"]) == 1
    assert transcript.turns[-1]["content"][0]["is_error"] is True


def test_what_the_model_sees_of_each_event() -> None:
    system = {
        "id": "s",
        "type": "system.message",
        "content": [{"type": "text", "text": "be brief"}],
    }
    redacted = {"id": "r", "type": "user.message", "content": [{"type": "redacted"}]}
    log = [msg("q"), system, redacted, custom("c"), idle("requires_action", "c")]
    log += [custom_result("c", "v"), running(), span("s1"), said("done"), span_end("s1"), fmt()]
    messages = build_messages(log)
    assert messages[0]["content"] == [
        {"type": "text", "text": "q"},
        {"type": "text", "text": "<system-message>be brief</system-message>"},
    ]
    assert messages[1]["content"][0]["type"] == "tool_use"
    assert messages[2]["content"][0]["content"] == [{"type": "text", "text": "v"}]
    assert messages[3] == {"role": "assistant", "content": [{"type": "text", "text": "done"}]}


def test_the_request_view_does_not_change_when_the_transcript_grows() -> None:
    transcript = Transcript()
    transcript.apply(parse_event(msg("q")))
    request = transcript.messages()
    transcript.apply(parse_event(msg("later")))
    assert request == [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
