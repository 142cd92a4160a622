"""Sandbox host uids for this test process.

Under pytest-xdist several workers run sandboxes at once. Per-uid kernel limits
(RLIMIT_NPROC counts every process of a real uid, machine-wide) would make one worker's fork
bomb starve another's sandbox if both drew the same uid from separate data dirs, so each
worker gets its own slice of the default range: for LocalHands made by tests (`WORKER_UIDS`)
and, through `CORRAL_SANDBOX_UID_RANGE`, for every server process the tests start.
"""

from __future__ import annotations

import os

from corral.hands._uids import UidRange
from corral.hands.local import DEFAULT_UID_RANGE

_SLICE = 4096


def _worker_index() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


def _worker_range() -> UidRange:
    first = DEFAULT_UID_RANGE.first + _worker_index() * _SLICE
    return UidRange(first, first + _SLICE - 1)


WORKER_UIDS = _worker_range()
ENV_VALUE = f"{WORKER_UIDS.first}-{WORKER_UIDS.last}"
