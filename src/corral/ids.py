"""Prefixed, time-sortable ids and UTC timestamps; pure helpers, no I/O."""

from __future__ import annotations

import base64
import os
import threading
import time
from datetime import UTC, datetime

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
# RFC 4648 base32 digits -> Crockford's, for encoding through the C base32 codec.
_FROM_RFC4648 = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _ALPHABET.encode())


def _encode(value: int, length: int) -> str:
    """`value` as `length` base32 digits (at most 32): one C call, not a loop of divmods
    (ids are made several times per event)."""
    digits = base64.b32encode(value.to_bytes(20, "big")).translate(_FROM_RFC4648)
    return digits[32 - length :].decode()


_RANDOM_BITS = 80
_last_lock = threading.Lock()
_last = (0, 0)  # (millis, random part) of the latest id this process made


def new_id(prefix: str) -> str:
    """A ULID-like id: 48 bits of milliseconds then 80 random bits, so ids sort by creation.

    Monotonic within a process (as ULID's monotonic mode): two ids made in the same
    millisecond get the second one's random part as the first one's plus one, so lists
    ordered by id keep creation order even for rows created in a burst.
    """
    global _last
    with _last_lock:
        millis = time.time_ns() // 1_000_000
        last_millis, last_rand = _last
        if millis <= last_millis and last_rand + 1 < (1 << _RANDOM_BITS):
            millis, rand = last_millis, last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(_RANDOM_BITS // 8), "big") >> 1
        _last = (millis, rand)
    return f"{prefix}_{_encode(millis << _RANDOM_BITS | rand, 26)}"


def utc_now() -> datetime:
    """The current time, timezone-aware (UTC)."""
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """Wire form of a timestamp: RFC 3339 with microseconds and a `Z` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_rfc3339() -> str:
    """`rfc3339(utc_now())`."""
    return rfc3339(utc_now())


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC 3339 / ISO 8601 timestamp; naive values are taken as UTC.

    Raises:
        ValueError: the text is not a timestamp.
    """
    moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment
