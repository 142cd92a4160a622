"""A small streaming HTTP/1.1 client for model providers: POST a body to one origin and read
the answer as it arrives, over kept-alive plain or TLS connections.

Why not httpx: a model call is one POST whose answer streams for seconds, and httpx's
per-request machinery (request and response models, header merging, a cancel scope around
each read, line decoding) cost about 2 ms of the event loop per call on a 2-core VM, the
largest single share of a text-only turn's CPU (`bench/brain.py`); this costs a fraction of
that. It does only what a model API needs: no redirects, cookies, proxies, compression or
HTTP/2. Everything that fails below HTTP (connect, TLS, a timeout, a cut or malformed
answer) is a `TransportError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

_MAX_HEAD = 64 * 1024
"""Bytes allowed for a response's status line and headers (and for one chunk-size line)."""
_MAX_IDLE = 32
"""Kept-alive connections held per client; more are closed when their exchange ends."""
_READ_SIZE = 64 * 1024
_FORBIDDEN_IN_HEADERS = ("\r", "\n", "\0")


class TransportError(Exception):
    """The exchange failed below HTTP: connect, TLS, a timeout, or a cut or malformed answer."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: scheme, host, port and the base URL's path (no trailing slash)."""

    tls: bool
    host: str
    port: int
    prefix: str

    @property
    def host_header(self) -> str:
        name = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        return name if self.port == default else f"{name}:{self.port}"


def parse_origin(base_url: str) -> Origin:
    """The origin of an `http(s)://host[:port][/path]` URL; ValueError for anything else."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL with a host: {base_url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"a base URL takes no query, fragment or credentials: {base_url!r}")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)  # urlsplit raises ValueError on a bad port
    return Origin(tls=tls, host=parts.hostname, port=port, prefix=parts.path.rstrip("/"))


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        """Still open at both ends, as far as the event loop has heard."""
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        """Drop the connection at once: a pending read sees the end of the stream."""
        self.writer.transport.abort()


class _Watchdog:
    """Aborts an exchange's connection when nothing arrives for `seconds`.

    One timer per exchange, moved on only when it fires before its time, instead of a
    timeout armed and cancelled around every read (which cost more than the read itself).
    """

    def __init__(self, conn: _Connection, seconds: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._conn = conn
        self.seconds = seconds
        self.last = self._loop.time()
        self.fired = False
        self._handle = self._loop.call_at(self.last + seconds, self._check)

    def touch(self) -> None:
        """Something arrived (or was sent): the stall is counted from now."""
        self.last = self._loop.time()

    def cancel(self) -> None:
        self._handle.cancel()

    def _check(self) -> None:
        due = self.last + self.seconds
        if self._loop.time() < due:
            self._handle = self._loop.call_at(due, self._check)
            return
        self.fired = True
        self._conn.abort()

    def error(self) -> TransportError:
        return TransportError(f"no answer within {self.seconds:g} s")


class Response:
    """A response whose head has been read; its body is read through `chunks` or `lines`."""

    def __init__(
        self,
        conn: _Connection,
        status: int,
        reason: str,
        headers: dict[str, str],
        watchdog: _Watchdog,
        keep_alive: bool,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        """Header names in lower case; a repeated header keeps its last value."""
        self._conn = conn
        self._watchdog = watchdog
        self._keep_alive = keep_alive
        self._done = False

    @property
    def reusable(self) -> bool:
        """Whether the connection can carry another exchange (the body was read to its end)."""
        return self._done and self._keep_alive

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (a stall longer than the client's timeout fails)."""
        if self._done:
            return
        if self.status in (204, 304) or 100 <= self.status < 200:
            self._done = True
            return
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            body = self._chunked()
        elif (length := self.headers.get("content-length")) is not None:
            body = self._sized(_content_length(length))
        else:
            self._keep_alive = False  # the body ends when the server closes
            body = self._until_eof()
        async for data in body:
            yield data
        self._done = True

    async def lines(self) -> AsyncIterator[str]:
        """The body as text lines (UTF-8, without their `\\n` or `\\r\\n`)."""
        rest = b""
        async for data in self.chunks():
            rest += data
            if b"\n" not in data:
                continue
            *whole, rest = rest.split(b"\n")
            for line in whole:
                yield line.removesuffix(b"\r").decode("utf-8", "replace")
        if rest:
            yield rest.removesuffix(b"\r").decode("utf-8", "replace")

    async def read(self, limit: int) -> bytes:
        """Up to `limit` bytes of the body (the rest is left unread)."""
        out = b""
        async for data in self.chunks():
            out += data
            if len(out) >= limit:
                break
        return out[:limit]

    async def _chunked(self) -> AsyncIterator[bytes]:
        reader = self._conn.reader
        while True:
            size_line = await self._read(reader.readuntil(b"\r\n"))
            try:
                size = int(size_line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise TransportError(f"bad chunk size line {size_line[:40]!r}") from None
            if size < 0:
                raise TransportError("bad chunk size")
            if size == 0:
                while await self._read(reader.readuntil(b"\r\n")) != b"\r\n":
                    pass  # trailer fields: nothing here needs them
                return
            data = await self._read(reader.readexactly(size + 2))
            if data[-2:] != b"\r\n":
                raise TransportError("chunk not followed by CRLF")
            yield data[:-2]

    async def _sized(self, length: int) -> AsyncIterator[bytes]:
        reader = self._conn.reader
        while length > 0:
            data = await self._read(reader.read(min(length, _READ_SIZE)))
            if not data:
                raise TransportError("connection closed before the end of the body")
            length -= len(data)
            yield data

    async def _until_eof(self) -> AsyncIterator[bytes]:
        reader = self._conn.reader
        while data := await self._read(reader.read(_READ_SIZE)):
            yield data

    async def _read(self, pending: Awaitable[bytes]) -> bytes:
        watchdog = self._watchdog
        try:
            data = await pending
        except asyncio.IncompleteReadError:
            if watchdog.fired:
                raise watchdog.error() from None
            raise TransportError("connection closed in the middle of the body") from None
        except asyncio.LimitOverrunError:
            raise TransportError("chunk size line too long") from None
        except OSError as exc:  # ConnectionError, ssl.SSLError
            if watchdog.fired:
                raise watchdog.error() from None
            raise TransportError(f"connection lost: {exc!r}") from exc
        if watchdog.fired:  # a read that ends at the end of the stream returns b""
            raise watchdog.error()
        watchdog.touch()
        return data


class Http1Client:
    """POSTs to one origin over HTTP/1.1, with fixed headers sent on every request."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: float,
        connect_timeout: float,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """Args:
        base_url: `http(s)://host[:port][/path]`; request paths are appended to its path.
        headers: sent with every request (names and values must not hold CR, LF or NUL).
        timeout: seconds allowed for each write and between two reads of the answer.
        connect_timeout: seconds allowed to connect (and finish the TLS handshake).
        tls: the context for https (default: certifi's roots, hostname checked).
        """
        self.origin = parse_origin(base_url)
        for name, value in headers.items():
            if any(c in name or c in value for c in _FORBIDDEN_IN_HEADERS):
                raise ValueError(f"header {name!r} holds a line break or NUL")
        lines = [f"host: {self.origin.host_header}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        self._fixed = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._tls = tls

    @contextlib.asynccontextmanager
    async def post(
        self, path: str, body: bytes, content_type: str = "application/json"
    ) -> AsyncIterator[Response]:
        """Send `body` to the base URL's path + `path`; the response's head has been read
        when this yields. The connection goes back to the pool if the body was read to its
        end, and is closed otherwise (an early exit, an error, a cancellation)."""
        request = (
            f"POST {self.origin.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
            + self._fixed
            + f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        conn, reused = self._take_idle(), True
        if conn is None:
            conn, reused = await self._connect(), False
        watchdog = _Watchdog(conn, self._timeout)
        response: Response | None = None
        try:
            try:
                response = await self._exchange(conn, request, watchdog)
            except _Stale:
                conn.close()
                watchdog.cancel()
                if not reused:
                    raise TransportError("server closed the connection without answering") from None
                # A kept-alive connection the server had closed: the request never reached
                # it, so it is sent once more on a new connection.
                conn = await self._connect()
                watchdog = _Watchdog(conn, self._timeout)
                response = await self._exchange(conn, request, watchdog)
            yield response
        finally:
            watchdog.cancel()
            if response is not None and response.reusable and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
            else:
                conn.close()

    async def aclose(self) -> None:
        """Close the kept-alive connections."""
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _take_idle(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        origin = self.origin
        tls = self._tls_context() if origin.tls else None
        try:
            async with asyncio.timeout(self._connect_timeout):
                reader, writer = await asyncio.open_connection(
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                    limit=_MAX_HEAD,
                )
        except TimeoutError:
            raise TransportError(f"connecting to {origin.host_header} timed out") from None
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(f"cannot connect to {origin.host_header}: {exc!r}") from exc
        return _Connection(reader, writer)

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = _default_tls()
        return self._tls

    async def _exchange(self, conn: _Connection, request: bytes, watchdog: _Watchdog) -> Response:
        """Write the request and read the response's head (skipping interim 1xx heads)."""
        await _send(conn, request, watchdog)
        first = True
        while True:
            head = await _read_head(conn, watchdog, first)
            first = False
            status, reason, version, headers = _parse_head(head)
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue, 103 Early Hints)
            keep_alive = (
                version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
            )
            return Response(conn, status, reason, headers, watchdog, keep_alive)


async def _send(conn: _Connection, request: bytes, watchdog: _Watchdog) -> None:
    try:
        conn.writer.write(request)
        await conn.writer.drain()
    except OSError as exc:
        if watchdog.fired:
            raise watchdog.error() from None
        if isinstance(exc, ConnectionError):
            raise _Stale() from exc
        raise TransportError(f"sending failed: {exc!r}") from exc
    watchdog.touch()


async def _read_head(conn: _Connection, watchdog: _Watchdog, first: bool) -> bytes:
    """A response head; `_Stale` when the first one finds the connection closed unanswered."""
    try:
        head = await conn.reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if watchdog.fired:
            raise watchdog.error() from None
        if first and not exc.partial:
            raise _Stale() from exc
        raise TransportError("connection closed in the middle of a response head") from exc
    except asyncio.LimitOverrunError as exc:
        raise TransportError("response head too large") from exc
    except OSError as exc:
        if watchdog.fired:
            raise watchdog.error() from None
        if first and isinstance(exc, ConnectionError):
            raise _Stale() from exc
        raise TransportError(f"connection lost: {exc!r}") from exc
    watchdog.touch()
    return head


class _Stale(Exception):
    """The server answered nothing and closed: on a kept-alive connection, send again."""


def _parse_head(head: bytes) -> tuple[int, str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise TransportError(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise TransportError(f"malformed header line {line[:80]!r}")
        headers[name.lower()] = value.strip()
    return int(code), reason, version, headers


def _content_length(value: str) -> int:
    if not value.isdigit():
        raise TransportError(f"bad content-length {value[:40]!r}")
    return int(value)


def _default_tls() -> ssl.SSLContext:
    """Certificates from certifi when installed (as httpx, which this replaces, trusted)."""
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())
