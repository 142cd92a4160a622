"""Context windows of models and when to compact; plain data and its parser, no I/O.

A `[[models.routes]]` entry of corral.toml may state `context_window` (tokens),
`compaction_threshold` (the fraction of the window the next request may fill before older
turns are summarised) and `compaction_model` (a cheaper model name, routed like any other, that
writes the summaries). Known Claude models have `DEFAULT_WINDOWS`; a model with no window is
never compacted. See docs/context.md.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_THRESHOLD = 0.8
"""Compact when the next request is estimated above this fraction of the window."""
MIN_WINDOW = 1024
"""Smaller windows cannot hold a summary and a turn."""
CONTEXT_KEYS = ("context_window", "compaction_threshold", "compaction_model")
"""The route keys this module parses."""

DEFAULT_WINDOWS: tuple[tuple[str, int], ...] = (
    # Public context windows (tokens) of the Claude models; the 1M-token betas need a header
    # Corral does not send, so 200k it is.
    ("claude-*", 200_000),
)
"""Models without an entry here need a `context_window` on their route to be compacted."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextPolicy:
    """How one model's context is managed."""

    window: int
    """Tokens the model accepts (request plus response)."""
    threshold: float = DEFAULT_THRESHOLD
    compaction_model: str | None = None
    """The model that writes summaries (None: the session's own model)."""

    def __post_init__(self) -> None:
        if isinstance(self.window, bool) or not isinstance(self.window, int):
            raise ValueError("context_window must be an integer number of tokens")
        if self.window < MIN_WINDOW:
            raise ValueError(f"context_window must be at least {MIN_WINDOW} tokens")
        threshold = self.threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError("compaction_threshold must be a number between 0.2 and 0.95")
        if not 0.2 <= threshold <= 0.95:
            raise ValueError("compaction_threshold must be between 0.2 and 0.95")

    @property
    def limit(self) -> int:
        """Estimated request tokens above which the brain compacts first."""
        return int(self.window * self.threshold)


def default_window(model: str) -> int | None:
    """The context window of a known model, else None."""
    for pattern, window in DEFAULT_WINDOWS:
        if fnmatch.fnmatchcase(model, pattern):
            return window
    return None


def parse_context(where: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """The context keys of a route entry, validated: `{window?, threshold?, compaction_model?}`.

    Raises:
        ValueError: the message names `where` and the key.
    """
    out: dict[str, Any] = {}
    if "context_window" in entry:
        out["window"] = entry["context_window"]
    if "compaction_threshold" in entry:
        out["threshold"] = entry["compaction_threshold"]
    if "compaction_model" in entry:
        model = entry["compaction_model"]
        if not isinstance(model, str) or not model:
            raise ValueError(f"{where}: 'compaction_model' must be a non-empty model name")
        out["compaction_model"] = model
    try:  # validate now, with a placeholder window when the route states none
        ContextPolicy(**{"window": MIN_WINDOW, **out})
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return out


def policy_for(model: str, route_context: Mapping[str, Any]) -> ContextPolicy | None:
    """`model`'s policy from its route's parsed keys and the defaults (None: unmanaged)."""
    window = route_context.get("window") or default_window(model)
    if window is None:
        return None
    return ContextPolicy(
        window=window,
        threshold=route_context.get("threshold", DEFAULT_THRESHOLD),
        compaction_model=route_context.get("compaction_model"),
    )
