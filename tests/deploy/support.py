"""SDK side of the deployment tests: wait for a server, run a turn, read its events."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from tests.fakes.messages_server import FakeModelServer

TOOLSET = {"type": "agent_toolset_20260401"}


def wait_healthy(
    url: str, timeout: float = 90, alive: Callable[[], str | None] | None = None
) -> None:
    """Until `GET /health` answers 200; `alive()` names why waiting is pointless (or None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if alive is not None and (reason := alive()) is not None:
            raise AssertionError(reason)
        time.sleep(0.5)
    raise AssertionError(f"{url}/health did not answer within {timeout} s")


def wait_for_requests(fake: FakeModelServer, count: int, timeout: float) -> None:
    """Until the fake model has received `count` requests."""
    deadline = time.monotonic() + timeout
    while len(fake.requests) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the model got {len(fake.requests)} of {count} requests")
        time.sleep(0.1)
