"""Turns cut short because the store could not write (a full or failing disk).

A brain that cannot write cannot record its own crash either, so it only remembers the
cause here (in this process), gives the session up, and lets it be claimed again; the next
run of the session (once a claim, itself a write, succeeds) records what happened before
anything else: the started tool calls whose results were lost get that cause as their
result (never run again: at most once), and the turn ends with a `session.error` naming
the disk. A process that dies meanwhile forgets the cause, and the turn is then repaired
as any turn a restart cut short.
"""

from __future__ import annotations

import threading

from corral.errors import StorageFailure

LOST_RESULT = (
    "The tool call ran, but its result could not be recorded: {cause}. Its outcome is "
    "unknown and it was not run again. Check its effects before retrying."
)


class LostWrites:
    """Sessions whose turn stopped on a storage failure: the failure, and the turn it
    stopped (thread-safe: several event loops may share a process's brains)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[str, tuple[StorageFailure, int]] = {}

    def remember(self, session_id: str, failure: StorageFailure, turn: int) -> None:
        """The turn of `session_id` after the close at seq `turn` stopped on `failure`
        (the first cause is kept)."""
        with self._lock:
            self._failures.setdefault(session_id, (failure, turn))

    def peek(self, session_id: str) -> tuple[StorageFailure, int] | None:
        """The failure to report for `session_id` and its turn, if any."""
        with self._lock:
            return self._failures.get(session_id)

    def forget(self, session_id: str) -> None:
        """The failure of `session_id` was recorded (or there was no turn to end)."""
        with self._lock:
            self._failures.pop(session_id, None)
