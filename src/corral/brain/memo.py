"""Folded states of the sessions this process drove last, so the next run of a session applies
only the events appended since, instead of folding its whole log again.

A memo of a pure function of an append-only prefix: a state folded up to seq N stays right
for that log forever, whoever appended after N. It is never the source of truth; a miss (new
process, eviction, another worker drove the session) just folds from the start.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from corral.brain.context import Transcript
from corral.brain.state import SessionState
from corral.observability.metrics import BRAIN_MEMO_BYTES, BRAIN_MEMO_SESSIONS

DEFAULT_CAPACITY = 256
"""Sessions remembered per process at most, however small."""
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Estimated bytes of folded state remembered per process (`brain_memo_mib`)."""
CALL_BYTES = 400
"""About what one tool-call record of a `SessionState` holds besides its input (which the
transcript's tool_use block shares)."""


@dataclass(slots=True)
class Folded:
    """A log folded up to `state.last_seq`: the decision state and the model's transcript."""

    state: SessionState
    transcript: Transcript

    @property
    def weight(self) -> int:
        """Estimated bytes this state holds: its conversation and its call records."""
        return self.transcript.weight + CALL_BYTES * len(self.state.calls)


class Memo:
    """Least recently driven sessions are forgotten first, when more than `capacity` sessions
    or more than `max_bytes` (estimated) would be kept. The bound is by size because a
    session's state grows with its conversation: a few long ones must not hold the memory of
    hundreds of short ones. A state larger than the whole budget is not kept (its next run
    folds its log again)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, max_bytes: int = DEFAULT_MAX_BYTES):
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, tuple[Folded, int]] = OrderedDict()
        self._bytes = 0

    def take(self, session_id: str) -> Folded | None:
        """Remove and return the session's folded state: a run owns it while it runs."""
        found = self._entries.pop(session_id, None)
        if found is None:
            return None
        self._bytes -= found[1]
        self._report()
        return found[0]

    def keep(self, session_id: str, folded: Folded) -> None:
        """Remember a state a run finished with (only clean ends: a crash may leave it torn)."""
        found = self._entries.get(session_id)
        if found is not None and found[0].state.last_seq > folded.state.last_seq:
            return  # a later run of the same session got further
        self.take(session_id)
        weight = folded.weight  # fixed while kept: a state is only changed by the run owning it
        if weight > self._max_bytes or self._max_bytes == 0:
            return
        self._entries[session_id] = (folded, weight)
        self._bytes += weight
        while len(self._entries) > self._capacity or self._bytes > self._max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped
        self._report()

    def _report(self) -> None:
        BRAIN_MEMO_BYTES.set(self._bytes)
        BRAIN_MEMO_SESSIONS.set(len(self._entries))

    @property
    def bytes(self) -> int:
        """Estimated bytes of the states kept."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
