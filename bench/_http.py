"""A minimal HTTP/1.1 client on asyncio streams for loopback benchmarks.

Why not httpx: its connection pool does O(requests x connections) work on every state change,
which at hundreds of concurrent requests costs the client seconds and would be blamed on the
server. One `Conn` is one keep-alive socket; no pooling, no TLS, no redirects, no retries.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any


class HttpError(RuntimeError):
    """A non-2xx answer."""


class Conn:
    """One keep-alive HTTP/1.1 connection to `host:port`."""

    def __init__(self, host: str, port: int, headers: Mapping[str, str] | None = None) -> None:
        self.host = host
        self.port = port
        self.headers = dict(headers or {})
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> Conn:
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, limit=1 << 20
        )
        return self

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _send_head(self, method: str, path: str, body: bytes) -> None:
        assert self._writer is not None, "connection not open"
        lines = [
            f"{method} {path} HTTP/1.1",
            f"host: {self.host}:{self.port}",
            *(f"{k}: {v}" for k, v in self.headers.items()),
        ]
        if body or method == "POST":
            lines += ["content-type: application/json", f"content-length: {len(body)}"]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)

    async def _read_head(self) -> tuple[int, dict[str, str]]:
        assert self._reader is not None
        raw = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = raw.decode("latin-1").split("\r\n")
        headers = {}
        for line in header_lines:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        return int(status_line.split()[1]), headers

    async def _read_body(self, headers: dict[str, str]) -> bytes:
        assert self._reader is not None
        if "content-length" in headers:
            return await self._reader.readexactly(int(headers["content-length"]))
        chunks = []
        while True:  # chunked
            size = int((await self._reader.readuntil(b"\r\n")).strip(), 16)
            chunks.append(await self._reader.readexactly(size + 2))
            if size == 0:
                return b"".join(chunks)

    async def request(self, method: str, path: str, payload: Any = None) -> Any:
        """Send one request and return the decoded JSON answer (None when empty); reconnects
        first if the server closed the idle keep-alive connection."""
        if self._reader is None or self._reader.at_eof():
            await self.close()
            await self.open()
        body = json.dumps(payload).encode() if payload is not None else b""
        self._send_head(method, path, body)
        status, headers = await self._read_head()
        data = await self._read_body(headers)
        if status >= 300:
            raise HttpError(f"{method} {path}: {status} {data[:300]!r}")
        return json.loads(data) if data.strip() else None

    async def stream_lines(
        self, method: str, path: str, payload: Any = None
    ) -> AsyncIterator[bytes]:
        """Send one request and yield the raw lines of a streamed answer until it closes.

        Chunk-size lines of the chunked encoding come through as short hex lines; SSE readers
        look only for `event:`/`data:`/`:` prefixes, and the servers here send each SSE frame
        as one chunk, so frames are never split by a chunk header.
        """
        assert self._reader is not None
        body = json.dumps(payload).encode() if payload is not None else b""
        self._send_head(method, path, body)
        status, _ = await self._read_head()
        if status >= 300:
            raise HttpError(f"{method} {path}: {status}")
        while True:
            line = await self._reader.readline()
            if not line:
                return
            yield line
