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

DEFAULT_CAPACITY = 256
"""Sessions remembered per process (each holds one conversation's messages)."""


@dataclass(slots=True)
class Folded:
    """A log folded up to `state.last_seq`: the decision state and the model's transcript."""

    state: SessionState
    transcript: Transcript


class Memo:
    """Least recently driven sessions are forgotten first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, Folded] = OrderedDict()

    def take(self, session_id: str) -> Folded | None:
        """Remove and return the session's folded state: a run owns it while it runs."""
        return self._entries.pop(session_id, None)

    def keep(self, session_id: str, folded: Folded) -> None:
        """Remember a state a run finished with (only clean ends: a crash may leave it torn)."""
        found = self._entries.get(session_id)
        if found is not None and found.state.last_seq > folded.state.last_seq:
            return  # a later run of the same session got further
        self._entries[session_id] = folded
        self._entries.move_to_end(session_id)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
