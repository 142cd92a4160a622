"""What one demo run produced: shared by the runner (which builds it) and the console (which
prints it), so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.demo.data import CULPRIT_COMMITS


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoResult:
    """What one demo run produced."""

    session_id: str
    final_text: str
    tool_calls: dict[str, int]
    """Calls per tool name, custom and sandbox alike."""
    stop_reason: str
    found_commits: frozenset[str]
    """Deployed commits named in the final answer."""
    input_tokens: int = 0
    output_tokens: int = 0
    scripted: bool = False

    @property
    def solved(self) -> bool:
        """Both culprit commits were named (and so the demo's answer was found)."""
        return set(CULPRIT_COMMITS.values()) <= self.found_commits


@dataclass(frozen=True, slots=True, kw_only=True)
class TeamResult:
    """What the second act produced: the coordinator's session and the follow-up's."""

    session_id: str
    """The coordinator's session (its threads are children of it)."""
    followup_id: str
    memory_store_id: str
    threads: tuple[tuple[str, str, str], ...]
    """(thread id, agent name, status) per thread, the primary first."""
    replies: int
    """Thread replies logged on the coordinator's log."""
    saved: tuple[str, ...]
    """Memory paths with a version attributed to the coordinator's session."""
    read_back: bool
    """A tool result of the follow-up session shows a line the coordinator saved."""
    final_text: str
    """The follow-up's answer."""

    @property
    def ok(self) -> bool:
        """Threads ran and replied, lessons were saved by the session and read back later."""
        return len(self.threads) >= 3 and self.replies >= 2 and bool(self.saved) and self.read_back
