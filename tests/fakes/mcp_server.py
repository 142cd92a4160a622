"""A real MCP server (the `mcp` SDK's FastMCP) on loopback that requires a bearer token, plus a
local OAuth token endpoint, for tests of Corral's MCP client. It must not import corral.

    with McpTestServer(tokens={"tok-1"}) as srv:
        srv.url          # streamable HTTP endpoint (…/mcp)
        srv.sse_url      # the older HTTP+SSE endpoint (…/sse)
        srv.legacy_url   # HTTP+SSE again, at …/events
        srv.token_url    # OAuth token endpoint: refresh_token grant

Served by uvicorn in a thread. `calls` records every tool call (name, arguments), so a test can
show a call ran exactly once; `token_requests` records the token endpoint's form posts.
`oauth_clients` serves many OAuth clients at once (keyed by refresh token, beside `oauth`), and
`echo_secrets` makes the server careless the way real ones are: a refused bearer or refresh
token is quoted back in the error body (the red-team suite checks Corral never repeats it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.fastmcp import FastMCP
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send


@dataclass(slots=True)
class OAuthClient:
    """What the token endpoint accepts: a refresh token, the client and how it authenticates."""

    refresh_token: str
    client_id: str
    client_secret: str | None = None
    auth_method: str = "client_secret_post"
    """`none`, `client_secret_basic` or `client_secret_post`."""
    next_tokens: list[str] = field(default_factory=list)
    """Access tokens to issue, in order; each issued one becomes valid at the MCP server."""


class _BearerGate:
    """ASGI middleware: the MCP paths need `Authorization: Bearer <a valid token>`."""

    def __init__(self, app: ASGIApp, server: McpTestServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith("/oauth"):
            headers = dict(scope.get("headers") or [])
            auth = headers.get(b"authorization", b"").decode()
            self.server.seen_auth.append(auth)
            if not auth.startswith("Bearer ") or auth[7:] not in self.server.tokens:
                body = {"error": "invalid_token"}
                if self.server.echo_secrets:
                    body["error_description"] = f"token {auth[7:]!r} is not valid here"
                response = JSONResponse(body, status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class McpTestServer:
    """FastMCP with tools `add`, `echo` and `slow`, behind a bearer-token gate."""

    def __init__(self, *, tokens: set[str] | None = None) -> None:
        self.tokens: set[str] = set(tokens or ())
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.seen_auth: list[str] = []
        self.oauth: OAuthClient | None = None
        self.oauth_clients: dict[str, OAuthClient] = {}
        self.echo_secrets = False
        self.token_requests: list[dict[str, str]] = []
        self.slow_seconds = 0.0
        self.port = _free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The streamable HTTP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def sse_url(self) -> str:
        """The HTTP+SSE endpoint."""
        return f"http://127.0.0.1:{self.port}/sse"

    @property
    def legacy_url(self) -> str:
        """HTTP+SSE at a path that does not end in /sse (streamable POSTs there get a 405)."""
        return f"http://127.0.0.1:{self.port}/events"

    @property
    def token_url(self) -> str:
        """The OAuth token endpoint."""
        return f"http://127.0.0.1:{self.port}/oauth/token"

    def _mcp(self) -> FastMCP:
        mcp = FastMCP("corral-test", host="127.0.0.1", port=self.port)

        @mcp.tool()
        def add(a: int, b: int) -> str:
            """Add two integers."""
            self.calls.append(("add", {"a": a, "b": b}))
            return str(a + b)

        @mcp.tool()
        def echo(text: str) -> str:
            """Echo the text back."""
            self.calls.append(("echo", {"text": text}))
            return text

        @mcp.tool(name="dotted.name")
        def dotted(text: str) -> str:
            """A tool whose name needs sanitising."""
            self.calls.append(("dotted.name", {"text": text}))
            return text.upper()

        @mcp.tool()
        async def slow(text: str) -> str:
            """Sleep for a while, then echo."""
            self.calls.append(("slow", {"text": text}))
            await asyncio.sleep(self.slow_seconds)
            return text

        return mcp

    async def _token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        header = request.headers.get("authorization", "")
        self.token_requests.append({**form, "_authorization": header})
        client = self.oauth_clients.get(form.get("refresh_token", ""), self.oauth)
        if client is None or form.get("grant_type") != "refresh_token":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        if form.get("refresh_token") != client.refresh_token:
            error = {"error": "invalid_grant"}
            if self.echo_secrets:
                error["error_description"] = f"refresh token {form.get('refresh_token')} unknown"
            return JSONResponse(error, status_code=400)
        if not _client_ok(client, form, header):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if not client.next_tokens:
            return JSONResponse({"error": "temporarily_unavailable"}, status_code=503)
        token = client.next_tokens.pop(0)
        self.tokens.add(token)
        body = {"access_token": token, "token_type": "Bearer", "expires_in": 3600}
        return JSONResponse(body)

    def start(self) -> McpTestServer:
        """Serve in a thread; returns once the port accepts connections."""
        mcp = self._mcp()
        app = mcp.streamable_http_app()
        app.router.routes.extend(mcp.sse_app().routes)
        # The same server over HTTP+SSE at a path that does not say so (a client must fall
        # back to it from streamable HTTP): its own transport, so its own message path.
        mcp.settings.sse_path, mcp.settings.message_path = "/events", "/events-messages/"
        app.router.routes.extend(mcp.sse_app().routes)
        app.router.routes.append(Route("/oauth/token", self._token, methods=["POST"]))
        gated = _BearerGate(app, self)
        config = uvicorn.Config(
            gated, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return self
            time.sleep(0.02)
        raise RuntimeError("MCP test server did not start")

    def stop(self) -> None:
        """Stop serving (the port then refuses connections)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> McpTestServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _client_ok(client: OAuthClient, form: dict[str, str], header: str) -> bool:
    if client.auth_method == "client_secret_basic":
        raw = f"{client.client_id}:{client.client_secret}".encode()
        return header == "Basic " + base64.b64encode(raw).decode()
    if form.get("client_id") != client.client_id:
        return False
    if client.auth_method == "client_secret_post":
        return form.get("client_secret") == client.client_secret
    return "client_secret" not in form


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
