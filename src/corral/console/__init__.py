"""The web console: static pages served at /console, a browser client of the public /v1 API.

Nothing here reads the store or the runtime: the pages hold no data until the user signs in
with an API key, and every request they make goes to /v1 with that key like any other client.
"""

from __future__ import annotations

from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).resolve().parent / "static"

# The pages load only their own scripts and styles and talk only to this origin; they can be
# framed by nobody (the console shows session contents and holds an API key in the tab).
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self' data:; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]


class _WithHeaders:
    """Adds `SECURITY_HEADERS` to every response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def routes() -> list[BaseRoute]:
    """`GET /console` (redirect) and the static files under `/console/`."""

    async def to_index(_: Request) -> Response:
        return RedirectResponse("/console/", status_code=308)

    files = StaticFiles(directory=STATIC_DIR, html=True)
    return [
        Route("/console", to_index, methods=["GET", "HEAD"]),
        Mount("/console", app=_WithHeaders(files)),
    ]
