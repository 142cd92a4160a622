"""What the deployment tests share: the agent toolset, waiting for a server to answer."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

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
