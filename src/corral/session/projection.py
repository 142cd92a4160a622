"""Fold one appended event into the session row's summary (status, usage, stats); pure.

Both store backends call this inside the append's transaction, so the row never disagrees
with the log.
"""

from __future__ import annotations

from typing import Any

from corral.ids import parse_rfc3339
from corral.session.log import SessionSummary

_STATUS_BY_EVENT = {
    "session.status_running": "running",
    "session.status_idle": "idle",
    "session.status_rescheduled": "rescheduling",
    "session.status_terminated": "terminated",
}

_USAGE_KEYS = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_input_tokens": "cache_read_input_tokens",
}


def project(summary: SessionSummary, event: dict[str, Any]) -> SessionSummary:
    """Apply `event` to `summary` in place and return it."""
    kind = event.get("type")
    if kind in _STATUS_BY_EVENT:
        _apply_status(summary, _STATUS_BY_EVENT[str(kind)], str(event.get("processed_at")))
    elif kind == "span.model_request_end":
        _add_usage(summary.usage, event.get("model_usage") or {})
    return summary


def _apply_status(summary: SessionSummary, status: str, at: str) -> None:
    if summary.status == status:
        return
    running_since = summary.stats.pop("running_since", None)
    if running_since is not None:
        elapsed = (parse_rfc3339(at) - parse_rfc3339(running_since)).total_seconds()
        total = float(summary.stats.get("active_seconds", 0.0)) + max(elapsed, 0.0)
        summary.stats["active_seconds"] = total
        summary.usage["active_seconds"] = total
    if status == "running":
        summary.stats["running_since"] = at
    summary.status = status


def _add_usage(usage: dict[str, Any], model_usage: dict[str, Any]) -> None:
    for source, target in _USAGE_KEYS.items():
        usage[target] = int(usage.get(target, 0)) + int(model_usage.get(source, 0) or 0)
    created = int(model_usage.get("cache_creation_input_tokens", 0) or 0)
    if created:
        cache = usage.setdefault("cache_creation", {})
        cache["ephemeral_5m_input_tokens"] = (
            int(cache.get("ephemeral_5m_input_tokens", 0)) + created
        )
