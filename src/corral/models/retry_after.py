"""How long a provider asks us to wait before the next call, read from its answer's headers.

Precedence, most precise first: `retry-after-ms` (OpenAI-compatible servers), `retry-after`
(seconds or an HTTP date, RFC 9110), then the rate-limit reset headers of the limits the
answer says are used up: Anthropic's `anthropic-ratelimit-<limit>-reset` (RFC 3339 times)
and OpenAI's `x-ratelimit-reset-<limit>` (Go durations: `1s`, `6m0s`, `20ms`). A limit whose
`-remaining` header is above zero is not what refused us, so its reset is not waited for.
Nothing here sleeps or decides whether to retry: the brain does, within its bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

_ANTHROPIC = re.compile(r"anthropic-ratelimit-(?P<limit>[a-z-]+)-reset")
_OPENAI = re.compile(r"x-ratelimit-reset-(?P<limit>[a-z-]+)")
_GO_DURATION = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def requested_wait(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds the provider asks us to wait (0 for a time already past), or None when its
    headers say nothing usable. `headers` are keyed in lower case."""
    now = now or datetime.now(UTC)
    if (ms := _number(headers.get("retry-after-ms"))) is not None:
        return ms / 1000
    if (value := headers.get("retry-after")) is not None:
        seconds = _number(value)
        if seconds is None:
            seconds = _until(_http_date(value), now)
        if seconds is not None:
            return seconds
    return _reset_wait(headers, now)


def _reset_wait(headers: Mapping[str, str], now: datetime) -> float | None:
    """The latest reset among the exhausted (or unreported) limits: every one must refill."""
    waits: list[float] = []
    for name, value in headers.items():
        if match := _ANTHROPIC.fullmatch(name):
            remaining = headers.get(f"anthropic-ratelimit-{match['limit']}-remaining")
            wait = _until(_rfc3339(value), now)
        elif match := _OPENAI.fullmatch(name):
            remaining = headers.get(f"x-ratelimit-remaining-{match['limit']}")
            wait = go_duration(value)
        else:
            continue
        used_up = remaining is None or _number(remaining) == 0
        if wait is not None and used_up:
            waits.append(wait)
    return max(waits) if waits else None


def go_duration(text: str) -> float | None:
    """Seconds in a Go duration string (`1s`, `6m0s`, `1h2m3.5s`, `250ms`), or None."""
    text = text.strip()
    if not text:
        return None
    if text == "0":
        return 0.0
    parts = list(_GO_DURATION.finditer(text))
    if "".join(p.group(0) for p in parts) != text:
        return None
    return sum(float(p["value"]) * _GO_UNITS[p["unit"]] for p in parts)


def _number(text: str | None) -> float | None:
    """A finite, non-negative number of seconds (or ms), or None."""
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _http_date(text: str) -> datetime | None:
    try:
        parsed = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _rfc3339(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _until(moment: datetime | None, now: datetime) -> float | None:
    if moment is None:
        return None
    return max((moment - now).total_seconds(), 0.0)
