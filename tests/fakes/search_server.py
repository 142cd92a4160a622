"""A loopback stand-in for the web search providers Corral speaks to: a SearXNG instance
(`GET /search?format=json`), the Brave Search API (`GET /res/v1/web/search`) and Tavily
(`POST /search`). It records every request and answers with `results`. No corral imports.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True, slots=True)
class Hit:
    """A result the stand-in returns (each provider renames the fields its own way)."""

    title: str
    url: str
    snippet: str
    age: str | None = None


@dataclass(frozen=True, slots=True)
class SeenRequest:
    """One request the stand-in received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeSearchServer:
    """The stand-in on 127.0.0.1 in a background thread; change the fields to script it."""

    results: list[Hit] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    raw_body: bytes | None = None
    """Sent instead of the provider's JSON when set (a malformed answer)."""
    seen: list[SeenRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stand_in._answer(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                stand_in._answer(self, json.loads(self.rfile.read(length) or b"null"))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeSearchServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _answer(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        parts = urlsplit(handler.path)
        self.seen.append(
            SeenRequest(
                method=handler.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={k.lower(): v for k, v in handler.headers.items()},
                body=body,
            )
        )
        if self.delay:
            time.sleep(self.delay)
        payload = self.raw_body if self.raw_body is not None else self._payload(handler, parts.path)
        try:
            handler.send_response(self.status)
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test)

    def _payload(self, handler: BaseHTTPRequestHandler, path: str) -> bytes:
        if path == "/res/v1/web/search":  # Brave
            items = [
                {"title": h.title, "url": h.url, "description": h.snippet, "page_age": h.age}
                for h in self.results
            ]
            return json.dumps({"type": "search", "web": {"results": items}}).encode()
        if handler.command == "POST":  # Tavily
            items = [
                {"title": h.title, "url": h.url, "content": h.snippet, "score": "0.5"}
                for h in self.results
            ]
            return json.dumps({"results": items}).encode()
        items = [  # SearXNG
            {"title": h.title, "url": h.url, "content": h.snippet, "publishedDate": h.age}
            for h in self.results
        ]
        return json.dumps({"results": items, "number_of_results": len(items)}).encode()
