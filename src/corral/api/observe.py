"""Operators' views of a running server: GET /metrics and one log line per HTTP request."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.ids import new_id
from corral.observability.logs import fields
from corral.observability.metrics import CONTENT_TYPE, render
from corral.session.queue import WorkQueue

log = logging.getLogger("corral.http")


def metrics_endpoint(queue: WorkQueue) -> Callable[[Request], Awaitable[Response]]:
    """GET /metrics: this process's metrics and the store's session and queue gauges."""

    async def metrics(_: Request) -> Response:
        status = await queue.queue_status()
        body = render(
            dict(status.sessions),
            {"pending": status.pending, "leased": status.leased, "expired": status.expired},
        )
        return Response(body, media_type=CONTENT_TYPE)

    return metrics


class AccessLog:
    """Outermost middleware: gives every response a `request-id` (error envelopes already
    carry theirs) and logs method, path, status, duration and that id once it is done
    (`GET /health`, polled by load balancers and probes, only at DEBUG).

    Never logs headers or query strings: they may carry keys and tokens.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen: dict[str, object] = {"status": 500, "request_id": None}

        async def tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                headers = list(message.get("headers") or [])
                found = next((v for k, v in headers if k.lower() == b"request-id"), None)
                if found is None:
                    found = new_id("req").encode()
                    headers.append((b"request-id", found))
                    message = {**message, "headers": headers}
                seen["request_id"] = found.decode()
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            log.log(
                logging.DEBUG if scope.get("path") in ("/health", "/health/live") else logging.INFO,
                "%s %s %s",
                scope.get("method"),
                scope.get("path"),
                seen["status"],
                extra=fields(
                    kind="request",
                    method=scope.get("method"),
                    path=scope.get("path"),
                    status=seen["status"],
                    duration_ms=round((time.perf_counter() - started) * 1000, 2),
                    request_id=seen["request_id"],
                ),
            )
