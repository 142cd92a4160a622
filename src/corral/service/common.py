"""Helpers shared by services: pagination envelopes, metadata patches, wire timestamps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from corral.errors import BadRequest
from corral.ids import parse_rfc3339, rfc3339

T = TypeVar("T")


def page_envelope(
    rows: Sequence[T], limit: int, render: Callable[[T], dict[str, Any]], cursor: Callable[[T], str]
) -> dict[str, Any]:
    """`{data, next_page}` from a `limit + 1` fetch."""
    more = len(rows) > limit
    shown = list(rows[:limit])
    return {
        "data": [render(r) for r in shown],
        "next_page": cursor(shown[-1]) if more and shown else None,
    }


def apply_metadata_patch(
    current: dict[str, str], patch: dict[str, str | None] | None
) -> dict[str, str]:
    """String values upsert, None deletes, omitted keys are kept."""
    merged = dict(current)
    for key, value in (patch or {}).items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if len(merged) > 16:
        raise BadRequest("metadata: at most 16 pairs", error_code="invalid_metadata")
    return merged


def normalize_time(value: str | None, field: str) -> str | None:
    """A client timestamp filter in our stored RFC 3339 form (so text comparison works)."""
    if value is None:
        return None
    try:
        return rfc3339(parse_rfc3339(value))
    except (ValueError, OverflowError) as exc:
        raise BadRequest(f"{field}: not an RFC 3339 timestamp: {value!r}") from exc


def check_limit(value: int | None, *, default: int, maximum: int) -> int:
    """Validate a `limit` query parameter."""
    if value is None:
        return default
    if value < 1 or value > maximum:
        raise BadRequest(f"limit: must be between 1 and {maximum}")
    return value
