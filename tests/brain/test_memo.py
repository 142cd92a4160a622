"""The brain's memo of folded sessions is bounded by estimated size as well as by count."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from corral.brain.context import Transcript, memory_weight
from corral.brain.memo import Folded, Memo
from corral.brain.state import SessionState
from corral.wire.events import parse_event
from tests.brain import logs


def folded(last_seq: int, text_bytes: int) -> Folded:
    transcript = Transcript()
    transcript.turns.append({"role": "user", "content": [{"type": "text", "text": "x"}]})
    transcript.weight = text_bytes
    return Folded(state=SessionState(last_seq=last_seq), transcript=transcript)


def test_the_least_recently_kept_go_first_when_the_bytes_run_out() -> None:
    memo = Memo(capacity=100, max_bytes=3_000)
    for name in ("a", "b", "c"):
        memo.keep(name, folded(1, 1_000))
    memo.keep("d", folded(1, 1_000))
    assert memo.take("a") is None
    assert all(memo.take(name) is not None for name in ("b", "c", "d"))
    assert memo.bytes == 0


def test_a_state_larger_than_the_whole_budget_is_not_kept_and_evicts_nothing() -> None:
    memo = Memo(capacity=100, max_bytes=3_000)
    memo.keep("small", folded(1, 1_000))
    memo.keep("huge", folded(1, 10_000))
    assert memo.take("huge") is None
    assert memo.take("small") is not None


def test_a_grown_state_replaces_its_older_self_and_its_weight() -> None:
    memo = Memo(capacity=100, max_bytes=10_000)
    memo.keep("s", folded(1, 1_000))
    memo.keep("s", folded(2, 4_000))
    assert len(memo) == 1
    assert memo.bytes >= 4_000
    memo.keep("s", folded(1, 1_000))  # an older run's state never overwrites a newer one
    taken = memo.take("s")
    assert taken is not None and taken.state.last_seq == 2


def test_a_zero_budget_keeps_nothing() -> None:
    memo = Memo(max_bytes=0)
    memo.keep("s", folded(1, 0))
    assert len(memo) == 0


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdefgh"), st.integers(0, 4_000), st.booleans()),
        max_size=60,
    )
)
def test_bounds_and_accounting_hold_under_any_order(ops: list[tuple[str, int, bool]]) -> None:
    memo = Memo(capacity=4, max_bytes=8_000)
    for seq, (name, size, take) in enumerate(ops, start=1):
        if take:
            memo.take(name)
        else:
            memo.keep(name, folded(seq, size))
        kept = [entry for entry, _ in memo._entries.values()]
        assert len(kept) <= 4
        assert memo.bytes == sum(entry.weight for entry in kept) <= 8_000


def test_the_transcript_weight_follows_what_it_holds() -> None:
    block = {"type": "text", "text": "y" * 10_000}
    assert 10_000 < memory_weight(block) < 10_500
    nested = {"type": "tool_result", "content": [block, block]}
    assert memory_weight(nested) > 2 * memory_weight(block)


def test_the_estimate_is_near_what_cpython_really_holds() -> None:
    """The memo's budget means MiB: a transcript of tool calls and texts, folded from events
    parsed from JSON as the log's are, weighs within 30 % of what tracemalloc counts for it."""
    bodies: list[dict[str, Any]] = []
    for i in range(300):
        call = f"sevt_{i:026d}"
        bodies += [logs.msg("next please"), logs.use(call)]
        bodies += [logs.result(call, "x" * 300), logs.said(f"Step {i} done.")]
    texts = [json.dumps(body) for body in bodies]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        transcript = Transcript()
        for text in texts:
            transcript.apply(parse_event(json.loads(text)))
        real = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.7 < transcript.weight / real < 1.3, (transcript.weight, real)
