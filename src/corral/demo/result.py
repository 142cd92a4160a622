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
