"""`GET /health` (readiness: the store answers) and `GET /health/live` (liveness: the process
answers), served by `corral serve` and by `corral worker --metrics-port`.

A load balancer polls `/health` to stop sending requests to a process whose store is gone
(each would wait `store_timeout_seconds` and answer 503); an orchestrator that restarts
processes polls `/health/live`, because restarting cannot bring a lost database back. The
store check is one `SELECT 1` with its own short bound, and its result is kept for a second
so that many probes cost the database one query per second per process.
"""

from __future__ import annotations

import time

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from corral import __version__
from corral.errors import StoreUnavailable
from corral.store.base import Store

CHECK_SECONDS = 2.0
"""Bound of the store check (lower still when `store_timeout_seconds` is)."""
CACHE_SECONDS = 1.0


class StoreHealth:
    """The store's last check, refreshed at most once per `CACHE_SECONDS`."""

    def __init__(self, store: Store, store_timeout: float) -> None:
        self._store = store
        self._bound = min(CHECK_SECONDS, store_timeout)
        self._lock = anyio.Lock()
        self._checked_at = -CACHE_SECONDS
        self._problem: str | None = None

    async def problem(self) -> str | None:
        """None when the store answered; else what is wrong with it."""
        async with self._lock:  # concurrent probes share one check
            if time.monotonic() - self._checked_at >= CACHE_SECONDS:
                self._problem = await self._check()
                self._checked_at = time.monotonic()
            return self._problem

    async def _check(self) -> str | None:
        try:
            await self._store.ping(self._bound)  # bounded by the store itself
        except StoreUnavailable as exc:
            return exc.message
        except Exception as exc:  # any failure to answer SELECT 1 means: not ready
            return f"the store check failed: {type(exc).__name__}: {exc}"
        return None


def routes(store: Store, store_timeout: float) -> list[Route]:
    """`/health` and `/health/live` for one process."""
    health = StoreHealth(store, store_timeout)

    async def ready(_: Request) -> Response:
        problem = await health.problem()
        if problem is not None:
            return JSONResponse(
                {
                    "status": "unavailable",
                    "version": __version__,
                    "store": {"status": "unavailable", "error": problem},
                },
                status_code=503,
            )
        return JSONResponse({"status": "ok", "version": __version__, "store": {"status": "ok"}})

    async def live(_: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__})

    return [Route("/health", ready), Route("/health/live", live)]
