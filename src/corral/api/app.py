"""The ASGI app: auth, error envelopes, routes; lifespan runs the brain scheduler."""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from corral import __version__, console
from corral.api import files, health, memory_stores, resources, sessions, threads, vaults, work
from corral.api.http import error_response, for_request
from corral.api.observe import AccessLog, metrics_endpoint
from corral.api.stream import StreamRouter
from corral.api.work import WorkerAuth
from corral.errors import ApiError, NotFound, Unauthorized
from corral.runtime import Runtime

log = logging.getLogger("corral.api")


class ApiKeyAuth:
    """Every /v1 route needs `x-api-key` or `Authorization: Bearer` with a known key."""

    def __init__(
        self,
        app: ASGIApp,
        keys: tuple[str, ...],
        workers: WorkerAuth | None = None,
        *,
        metrics_public: bool = False,
    ) -> None:
        self.app = app
        self.keys = tuple(k.encode() for k in keys)
        self.workers = workers
        """Checks the scoped credentials of self-hosted workers (environment keys, sessions
        tokens) when the bearer is not an API key."""
        self.metrics_public = metrics_public
        """GET /metrics is open (`[metrics] public`); otherwise it needs an API key too."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        guarded = path.startswith("/v1") or (path == "/metrics" and not self.metrics_public)
        if guarded:
            refusal = await self._refusal(Request(scope))
            if refusal is not None:
                await error_response(refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _refusal(self, request: Request) -> ApiError | None:
        given = request.headers.get("x-api-key")
        auth = request.headers.get("authorization", "")
        if given is None and auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        if given and any(hmac.compare_digest(given.encode(), key) for key in self.keys):
            return None
        if self.workers is None or not request.url.path.startswith("/v1"):
            return Unauthorized("invalid or missing API key")
        try:
            return await self.workers.refusal(request.method, request.url.path, given)
        except ApiError as exc:
            return exc


def create_app(runtime: Runtime) -> Starlette:
    """The HTTP app for `runtime`; its lifespan runs this process's brain workers."""

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(runtime.scheduler.run)  # brains and their sandboxes' tick, if any
            yield
            # The scheduler returns once its brains handed their sessions over; what is
            # still running when the grace ends is cancelled (leases released on the way).
            runtime.stopping.request()
            tg.cancel_scope.deadline = anyio.current_time() + runtime.stopping.remaining()

    async def admin_status(request: Request) -> Response:
        queue = await runtime.store.queue_status()
        return JSONResponse(
            {
                "version": __version__,
                "queue": {
                    "pending": queue.pending,
                    "leased": queue.leased,
                    "expired": queue.expired,
                },
                "brains": {
                    "owner": runtime.scheduler.owner,
                    "slots": runtime.scheduler.concurrency,
                    "work": runtime.scheduler.deps.stats.snapshot(),
                },
                "sandboxes": {
                    "live": runtime.sandboxes.live,
                    "provisioned_total": runtime.sandboxes.provisioned,
                    "sandboxes": runtime.sandboxes.describe(),
                },
            }
        )

    async def not_found(request: Request, exc: Any) -> Response:
        return error_response(NotFound(f"no route for {request.method} {request.url.path}"))

    async def api_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiError)
        return error_response(for_request(exc, request.method))

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(
            ApiError("internal server error; the request was not applied or only partly applied")
        )

    app = Starlette(
        routes=[
            *health.routes(runtime.store, runtime.settings.store_timeout_seconds),
            Route("/v1/admin/status", admin_status),
            Route("/metrics", metrics_endpoint(runtime.store)),
            *resources.routes(runtime),
            *sessions.routes(runtime),
            *(threads.routes(runtime.threads) if runtime.threads is not None else []),
            *files.routes(runtime),
            *vaults.routes(runtime),
            *memory_stores.routes(runtime),
            *(work.routes(runtime.work) if runtime.work is not None else []),
            *console.routes(),
        ],
        lifespan=lifespan,
        exception_handlers={
            404: not_found,
            405: not_found,
            ApiError: api_error,
            Exception: internal_error,
        },
    )
    app.router.redirect_slashes = False  # a redirect would turn POST /x/%2F into a create
    return app


def create_asgi(runtime: Runtime) -> ASGIApp:
    """The full server: request log -> API key check -> SSE tails (bare ASGI) -> the app."""
    app = create_app(runtime)
    router = StreamRouter(
        app,
        runtime.store,
        lambda exc: error_response(for_request(exc, "GET")),  # streams are GETs
        ping_seconds=runtime.settings.sse_ping_seconds,
        stopping=runtime.stopping,
    )
    workers = WorkerAuth(runtime.work, runtime.store) if runtime.work is not None else None
    auth = ApiKeyAuth(
        router,
        runtime.settings.api_keys,
        workers,
        metrics_public=runtime.settings.metrics_public,
    )
    return AccessLog(auth)


def create_metrics_asgi(runtime: Runtime) -> ASGIApp:
    """What `corral worker --metrics-port` serves: GET /metrics (same key rule) and the
    health checks."""
    app = Starlette(
        routes=[
            Route("/metrics", metrics_endpoint(runtime.store)),
            *health.routes(runtime.store, runtime.settings.store_timeout_seconds),
        ]
    )
    return ApiKeyAuth(
        app, runtime.settings.api_keys, metrics_public=runtime.settings.metrics_public
    )
