"""A wire-level fake of the Anthropic Messages API and OpenAI chat completions on loopback.

It answers scripted turns over real HTTP (SSE exactly as the real APIs stream it) so the real
provider code runs in tests and benchmarks. It must not import corral.

    with FakeModelServer(ScriptedTurns([Turn([Text("hi")])])) as fake:
        AnthropicClient("test-key", fake.url)          # Anthropic: root URL (ANTHROPIC_BASE_URL)
        OpenAICompatClient(base_url=fake.openai_url)   # OpenAI: root URL + "/v1"

Run alone: `python -m tests.fakes.messages_server --port 8099 [--script FILE.json] [--repeat]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes import model_wire as wire
from tests.fakes.model_script import (
    ErrorReply,
    Handler,
    Reply,
    ScriptedTurns,
    Text,
    Thinking,
    ToolUse,
    Turn,
    Usage,
    by_marker,
    by_system,
    first_user_text,
    reply_from_json,
)

__all__ = [
    "ErrorReply",
    "FakeModelServer",
    "Handler",
    "RecordedRequest",
    "Reply",
    "ScriptedTurns",
    "Text",
    "Thinking",
    "ToolUse",
    "Turn",
    "Usage",
    "by_marker",
    "by_system",
    "first_user_text",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One request the fake received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float
    """`time.monotonic()` when it arrived (tests measure the waits between retries)."""


_SSE_HEADERS = {"cache-control": "no-cache"}


async def _client_gone(request: Request, exc: Exception) -> Response:
    """Nobody reads this answer: the client went away before sending its whole request."""
    return Response(status_code=499)


class FakeModelServer:
    """The fake on 127.0.0.1, served by uvicorn in a background thread.

    `url` is the root (give it to the Anthropic SDK / ANTHROPIC_BASE_URL); `openai_url` adds
    `/v1` (give it to the OpenAI SDK). `handler` may be swapped between requests.
    """

    def __init__(
        self, handler: Handler | Sequence[Reply], *, port: int = 0, tls_cert: Path | None = None
    ) -> None:
        """`tls_cert`: a PEM file holding a key and its certificate: serve HTTPS with it."""
        self.handler: Handler = handler if callable(handler) else ScriptedTurns(handler)
        self._port = port
        self._tls_cert = tls_cert
        self._recorded: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._bound_port: int | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/messages", self._messages, methods=["POST"]),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
            ],
            # a client killed mid-request (crash and chaos tests) is expected, not an error
            exception_handlers={ClientDisconnect: _client_gone},
        )

    @property
    def url(self) -> str:
        """The root URL; stays valid (and refused) after `stop`, for connection-error tests."""
        assert self._bound_port is not None, "server not started"
        scheme = "https" if self._tls_cert is not None else "http"
        return f"{scheme}://127.0.0.1:{self._bound_port}"

    @property
    def openai_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def recorded(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._recorded)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request body received so far, in arrival order."""
        return [r.body for r in self.recorded]

    def reset(self, handler: Handler | Sequence[Reply] | None = None) -> None:
        """Forget recorded requests and (optionally) install a new handler; lets one server
        serve many tests."""
        with self._lock:
            self._recorded.clear()
        if handler is not None:
            self.handler = handler if callable(handler) else ScriptedTurns(handler)

    def start(self) -> FakeModelServer:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", self._port))
        self._bound_port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            backlog=4096,
            timeout_graceful_shutdown=1,
            ssl_certfile=self._tls_cert,
            ssl_keyfile=self._tls_cert,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("fake model server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = None

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _receive(self, request: Request) -> tuple[dict[str, Any], Reply]:
        at = time.monotonic()
        body = await request.json()
        record = RecordedRequest(
            path=request.url.path, headers=dict(request.headers), body=body, at=at
        )
        with self._lock:
            self._recorded.append(record)
        return body, self.handler(body)

    async def _messages(self, request: Request) -> Response:
        body, reply = await self._receive(request)
        model = str(body.get("model", "fake"))
        if isinstance(reply, ErrorReply) and not (reply.mid_stream and body.get("stream")):
            error = wire.anthropic_error(reply)
            headers = {"request-id": error["request_id"], **reply.headers}
            return JSONResponse(error, status_code=reply.status, headers=headers)
        if body.get("stream"):
            stream = wire.anthropic_stream(reply, model)
            return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)
        assert isinstance(reply, Turn)
        await asyncio.sleep(reply.first_token_delay)
        return JSONResponse(wire.anthropic_message(reply, model))

    async def _chat(self, request: Request) -> Response:
        body, reply = await self._receive(request)
        model = str(body.get("model", "fake"))
        if isinstance(reply, ErrorReply) and not (reply.mid_stream and body.get("stream")):
            return JSONResponse(
                wire.openai_error(reply), status_code=reply.status, headers=dict(reply.headers)
            )
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            stream = wire.openai_stream(reply, model, include_usage)
            return StreamingResponse(stream, media_type="text/event-stream", headers=_SSE_HEADERS)
        assert isinstance(reply, Turn)
        await asyncio.sleep(reply.first_token_delay)
        return JSONResponse(wire.openai_completion(reply, model))


def _handler_from_file(path: str, repeat: bool) -> Handler:
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    if isinstance(data, dict) and "markers" in data:
        return by_marker(
            {
                marker: ScriptedTurns([reply_from_json(r) for r in replies], repeat_last=repeat)
                for marker, replies in data["markers"].items()
            }
        )
    return ScriptedTurns([reply_from_json(r) for r in data], repeat_last=repeat)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the fake in the foreground until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="JSON list of replies, or {'markers': {m: [...]}}")
    parser.add_argument("--repeat", action="store_true", help="repeat each script's last reply")
    args = parser.parse_args(argv)
    handler: Handler
    if args.script:
        handler = _handler_from_file(args.script, args.repeat)
    else:
        handler = ScriptedTurns([Turn([Text("Hello from the fake model.")])], repeat_last=True)
    with FakeModelServer(handler, port=args.port) as fake:
        print(f"fake model server on {fake.url} (OpenAI: {fake.openai_url})", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
