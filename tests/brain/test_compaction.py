"""Context compaction, pure: the meter `decide` reads, when `decide` compacts, where a
compaction cuts, what the model sees afterwards, and that a crash around the summary request
neither loses nor duplicates a summary (docs/context.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.brain import events as ev
from corral.brain.context import Transcript
from corral.brain.decide import (
    CallModel,
    Compact,
    FinishTurn,
    HandleInterrupt,
    RequestAction,
    StopAtBudget,
    StopAtCompactionLimit,
    decide,
)
from corral.brain.state import SessionState, apply
from corral.brain.window import (
    IMAGE_TOKENS,
    MAX_COMPACTIONS_IN_A_ROW,
    choose_cut,
    estimate_tokens,
    fit_result,
    summary_text,
)
from corral.models.base import ModelUsage
from corral.wire.events import parse_event
from tests.brain.logs import (
    Body,
    custom,
    custom_result,
    idle,
    interrupt,
    msg,
    running,
    said,
    span,
    span_end,
)


def fold_with(bodies: Iterable[Body], limit: int | None, cap: int | None = None) -> SessionState:
    """The state of a log whose session has a compaction threshold of `limit` tokens."""
    state = SessionState()
    state.context.limit, state.context.cap = limit, cap
    for seq, body in enumerate(bodies, start=1):
        apply(state, seq, parse_event(body))
    return state


def transcript_of(bodies: Iterable[Body], cap: int | None = None) -> Transcript:
    transcript = Transcript()
    transcript.result_cap = cap
    for body in bodies:
        transcript.apply(parse_event(body))
    return transcript


def summary_event(summary: str, cut_turn: int, after: int = 10, blocks: int = 0) -> Body:
    return ev.event(
        "corral.context_summary",
        summary=summary,
        cut_turn=cut_turn,
        cut_blocks=blocks,
        tokens_before=0,
        tokens_after=after,
        model="m",
        model_usage={"input_tokens": 5, "output_tokens": 3},
    )


def compacted(summary: str, cut_turn: int, after: int = 10, blocks: int = 0) -> list[Body]:
    """What a compaction appends (one append: both or neither)."""
    return [
        ev.event("agent.thread_context_compacted"),
        summary_event(summary, cut_turn, after, blocks),
    ]


def response(start: str, input_tokens: int) -> Body:
    return ev.span_end(start, ModelUsage(input_tokens=input_tokens, output_tokens=5))


# ---- the estimate -----------------------------------------------------------------------------


def test_estimate_is_three_bytes_per_token_and_deterministic() -> None:
    block = {"type": "text", "text": "x" * 300}
    size = len('{"type":"text","text":""}') + 300
    assert estimate_tokens(block) == -(-size // 3)
    assert estimate_tokens([block, block]) == 2 * estimate_tokens(block)
    assert estimate_tokens({"type": "text", "text": "é" * 30}) == -(-(25 + 60) // 3)  # UTF-8


def test_an_image_costs_a_flat_amount_not_its_base64() -> None:
    image = {"type": "image", "source": {"type": "base64", "data": "A" * 1_000_000}}
    assert estimate_tokens(image) == IMAGE_TOKENS


def test_a_result_too_large_is_truncated_with_a_note_and_small_ones_are_untouched() -> None:
    small = {"type": "tool_result", "tool_use_id": "a", "content": ev.text_content("ok")}
    assert fit_result(small, 100) is small
    big = {"type": "tool_result", "tool_use_id": "a", "content": ev.text_content("y" * 30_000)}
    fitted = fit_result(big, 1000)
    assert estimate_tokens(fitted["content"]) <= 1000
    assert fitted["content"][0]["text"] == "y" * len(fitted["content"][0]["text"])
    assert "truncated this tool result" in fitted["content"][-1]["text"]
    assert fitted["tool_use_id"] == "a"


def test_the_transcript_truncates_results_the_log_keeps_whole() -> None:
    log = [msg("go"), custom("c"), custom_result("c", "z" * 20_000)]
    (block,) = transcript_of(log, cap=500).messages()[-1]["content"]
    assert estimate_tokens(block["content"]) <= 500
    assert log[-1]["content"][0]["text"] == "z" * 20_000


# ---- the meter ----------------------------------------------------------------------------------


def test_the_meter_adds_estimates_and_learns_from_real_usage() -> None:
    state = fold_with([msg("a" * 300)], limit=None)
    before = state.context.next_request
    assert before > 100
    state = fold_with([msg("a" * 300), span("s"), said("ok"), response("s", 5000)], limit=None)
    # the real request held 5000 tokens for the estimate's `before`: the difference (system
    # prompt, tools, estimation error) is added to every later estimate
    assert state.context.correction == 5000 - before
    assert state.context.next_request > 5000


def test_a_provider_reporting_no_usage_teaches_nothing() -> None:
    state = fold_with([msg("a"), span("s"), span_end("s")], limit=None)
    assert state.context.correction is None


def test_a_summary_resets_the_estimate_and_counts_in_a_row_until_a_response() -> None:
    log = [msg("a" * 3000), *compacted("s1", 0, after=42)]
    state = fold_with(log, limit=10)
    assert (state.context.messages, state.context.compactions_in_a_row) == (42, 1)
    state = fold_with([*log, *compacted("s2", 0, after=40)], limit=10)
    assert state.context.compactions_in_a_row == 2
    state = fold_with([*log, span("s"), said("x"), response("s", 10)], limit=10)
    assert state.context.compactions_in_a_row == 0
    state = fold_with([*log, idle("retries_exhausted")], limit=10)
    assert state.context.compactions_in_a_row == 0


def test_the_summary_requests_tokens_count_in_the_usage() -> None:
    state = fold_with([msg("a"), *compacted("s", 0)], limit=None)
    assert state.usage == {"input_tokens": 5, "output_tokens": 3}


# ---- decide -------------------------------------------------------------------------------------

BIG = "w" * 6000  # about 2,000 tokens
BUDGET = ev.event(
    "corral.budget", budget={"type": "limit", "max_list_cost": {"amount": "0", "currency": "USD"}}
)
CASES: list[tuple[str, list[Body], int | None, str]] = [
    ("no window: never compacts", [msg(BIG)], None, "CallModel"),
    ("under the threshold", [msg(BIG)], 5000, "CallModel"),
    ("over the threshold", [msg(BIG)], 1000, "Compact"),
    (
        "over after a tool result",
        [msg("go"), custom("c"), custom_result("c", BIG)],
        1000,
        "Compact",
    ),
    ("over but the budget is spent", [BUDGET, msg(BIG)], 1000, "StopAtBudget"),
    ("over but interrupted", [msg(BIG), interrupt()], 1000, "HandleInterrupt"),
    ("over, awaiting the client", [msg(BIG), custom("c")], 1000, "RequestAction"),
    (
        "over, nothing to answer",
        [running(), msg(BIG), span("s"), said("x"), response("s", 10)],
        1000,
        "FinishTurn",
    ),
    (
        "over after too many compactions in a row",
        [msg(BIG), *[e for _ in range(MAX_COMPACTIONS_IN_A_ROW) for e in compacted("s", 0, 9999)]],
        1000,
        "StopAtCompactionLimit",
    ),
    (
        "a compaction that made room",
        [msg(BIG), *compacted("s", 0, after=100)],
        1000,
        "CallModel",
    ),
    (
        "compactions before a response do not count after it",
        [
            msg(BIG),
            *compacted("s", 0, 100),
            *compacted("s", 0, 100),
            span("s1"),
            said("ok"),
            response("s1", 100),
            msg(BIG),
        ],
        1000,
        "Compact",
    ),
]
KINDS = {
    "CallModel": CallModel,
    "Compact": Compact,
    "StopAtBudget": StopAtBudget,
    "HandleInterrupt": HandleInterrupt,
    "RequestAction": RequestAction,
    "FinishTurn": FinishTurn,
    "StopAtCompactionLimit": StopAtCompactionLimit,
}


@pytest.mark.parametrize(("name", "log", "limit", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide_compacts_exactly_when_the_next_request_passes_the_threshold(
    name: str, log: list[Body], limit: int | None, expected: str
) -> None:
    assert type(decide(fold_with(log, limit))) is KINDS[expected]


@given(st.integers(min_value=0, max_value=4000), st.integers(min_value=1, max_value=4000))
def test_compact_iff_estimate_above_limit(size: int, limit: int) -> None:
    state = fold_with([msg("q" * size)], limit)
    action = decide(state)
    assert isinstance(action, Compact) == (state.context.next_request > limit)
    assert isinstance(action, Compact | CallModel)


def test_a_failed_summary_request_is_retried_as_attempt_n() -> None:
    log = [msg(BIG), rescheduled_error()]
    assert decide(fold_with(log, 1000)) == Compact(1)


def rescheduled_error() -> Body:
    return ev.session_error("model_overloaded_error", "busy", "retrying")


# ---- where a compaction cuts --------------------------------------------------------------------


def turn(role: str, *blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "content": list(blocks)}


TEXT = {"type": "text", "text": "t"}


def tool_use(call: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call, "name": "lookup", "input": {}}


def tool_result(call: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call, "content": []}


def test_cut_keeps_the_last_turn_and_never_splits_a_tool_call() -> None:
    turns = [
        turn("user", TEXT),
        turn("assistant", tool_use("a")),
        turn("user", tool_result("a")),
        turn("assistant", TEXT),
        turn("user", TEXT),
    ]
    far = 10**9
    assert choose_cut(turns, keep=0, most=far) == (4, 0)  # the smallest tail: the last turn
    assert choose_cut(turns, keep=far, most=far) == (1, 0)  # all fits: cut as little as can be
    assert choose_cut(turns[:3], keep=0, most=far) == (1, 0)  # a result stays with its use
    assert choose_cut([turn("user", TEXT), turn("assistant", TEXT)], 0, far) == (1, 0)
    # even the smallest tail is too large: everything, the last turn's blocks included
    assert choose_cut(turns, keep=0, most=0) == (4, 1)
    assert choose_cut(turns[:3], keep=0, most=0) == (2, 1)
    assert choose_cut(turns[:1], keep=0, most=0) == (0, 1)
    assert choose_cut(turns[:1], keep=0, most=far) == (0, 1)
    assert choose_cut([turn("user")], keep=0, most=0) is None  # nothing left to summarise
    assert choose_cut([], keep=0, most=0) is None
    # a call still open is never summarised away
    open_call = [turn("user", TEXT), turn("assistant", tool_use("a")), turn("user", TEXT)]
    assert choose_cut(open_call, keep=0, most=0) == (1, 0)


def test_a_full_cut_keeps_input_that_arrived_during_the_summary_request() -> None:
    log = [msg("a" * 3000), custom("c"), custom_result("c", "b" * 3000)]
    turns = transcript_of(log).turns
    assert choose_cut(turns, keep=0, most=0) == (2, 1)
    log += [msg("arrived meanwhile"), *compacted("all of it", 2, blocks=1)]
    assert transcript_of(log).messages() == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": summary_text("all of it"),
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "arrived meanwhile"},
            ],
        }
    ]


# ---- what the model sees: summary + tail --------------------------------------------------------

STEP = st.sampled_from(["say", "tool", "reply"])


def conversation(steps: list[str]) -> list[Body]:
    """A log of model requests answering user messages and custom tool results."""
    log: list[Body] = []
    for index, step in enumerate(steps):
        log.append(msg(f"user {index} " + "u" * (index * 7 % 50)))
        log.append(span(f"s{index}"))
        if step == "tool":
            log.append(custom(f"c{index}"))
            log.append(response(f"s{index}", 10))
            log.append(custom_result(f"c{index}", "r" * (index * 13 % 90)))
            log.append(span(f"t{index}"))
            log.append(said(f"answer {index}"))
            log.append(response(f"t{index}", 10))
        else:
            log.append(said(f"answer {index}"))
            log.append(response(f"s{index}", 10))
    return log


def check_request_shape(messages: list[dict[str, Any]]) -> None:
    """Alternating roles starting with the user; every tool use answered in the next turn."""
    assert messages and messages[0]["role"] == "user"
    for before, after in zip(messages, messages[1:], strict=False):
        assert before["role"] != after["role"]
        uses = {b["id"] for b in before["content"] if b.get("type") == "tool_use"}
        results = {b["tool_use_id"] for b in after["content"] if b.get("type") == "tool_result"}
        assert uses <= results


@settings(max_examples=60, deadline=None)
@given(
    st.lists(STEP, min_size=2, max_size=10),
    st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=3),
    st.integers(min_value=0, max_value=8),
)
def test_context_after_compactions_is_the_summary_and_the_tail(
    steps: list[str], keeps: list[int], extra: int
) -> None:
    log = conversation(steps)
    original = transcript_of(log).messages()
    dropped = 0
    for round_, keep in enumerate(keeps):
        transcript = transcript_of(log)
        cut = choose_cut(transcript.turns, keep, 10**9)
        if cut is None:
            break
        assert cut[1] == 0
        dropped += cut[0]
        log += compacted(f"summary {round_}", dropped)
        log += [msg(f"later {round_}"), span(f"x{round_}"), said("ok"), response(f"x{round_}", 9)]
        original += [
            {"role": "user", "content": [{"type": "text", "text": f"later {round_}"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        ]
    log += [msg("final")]
    full = transcript_of(log).messages()
    check_request_shape(full)
    if dropped == 0:
        return
    head = full[0]["content"][0]
    assert head["text"] == summary_text(head_summary(log))
    # the tail is exactly the uncompacted conversation from the cut on, with the new input
    tail_original = _merge_final(original, "final")[dropped:]
    rest = full[0]["content"][1:]
    rebuilt = ([{"role": "user", "content": rest}] if rest else []) + full[1:]
    assert rebuilt == tail_original
    # a brain folding the log incrementally (any split) builds the same request
    split = len(log) - 1 - extra % len(log)
    incremental = transcript_of(log[:split])
    for body in log[split:]:
        incremental.apply(parse_event(body))
    assert incremental.messages() == full


def head_summary(log: list[Body]) -> str:
    return str([b for b in log if b["type"] == "corral.context_summary"][-1]["summary"])


def _merge_final(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    block = {"type": "text", "text": text}
    if messages and messages[-1]["role"] == "user":
        return [*messages[:-1], {"role": "user", "content": [*messages[-1]["content"], block]}]
    return [*messages, {"role": "user", "content": [block]}]


# ---- crashes around the summary request ---------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(STEP, min_size=3, max_size=8), st.integers(min_value=0, max_value=3))
def test_a_crash_between_summary_request_and_event_loses_and_duplicates_nothing(
    steps: list[str], crashes: int
) -> None:
    log = [*conversation(steps), msg("next " + BIG)]
    limit = 1000
    # Each brain that dies during its summary request appended nothing: the next one, folding
    # the same log, decides the same compaction with the same cut.
    cuts = set()
    for _ in range(crashes + 1):
        state = fold_with(log, limit)
        assert decide(state) == Compact(0)
        cuts.add(choose_cut(transcript_of(log).turns, 250, 10**9))
    (cut,) = cuts
    assert cut is not None
    log += compacted("the summary", cut[0], after=200, blocks=cut[1])
    state = fold_with(log, limit)
    assert decide(state) == CallModel(0)
    messages = transcript_of(log).messages()
    texts = [b.get("text", "") for m in messages for b in m["content"]]
    assert sum("the summary" in t for t in texts) == 1
    assert texts[0] == summary_text("the summary")
    assert ("next " + BIG) in texts  # the input the compaction waited on is still there
    assert sum(1 for b in log if b["type"] == "agent.thread_context_compacted") == 1
