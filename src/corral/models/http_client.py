"""The model providers' HTTP client: POST a body to one origin and read the answer as it
arrives, over httpcore's pool of kept-alive connections, through the operator's proxy.

Why httpcore and not httpx: a model call is one POST whose answer streams for seconds, and
httpx's per-request layers (request and response models, header merging, line decoding) on
top of httpcore cost 1.7-1.9 ms of the event loop per call on a 2-core VM, against 1.0-1.15 ms
for httpcore alone (docs/performance.md). httpcore brings what the hand-written client it
replaced lacked: CONNECT tunnels through `HTTPS_PROXY` (forwarding through `HTTP_PROXY`),
`NO_PROXY`, and the `SSL_CERT_FILE`/`SSL_CERT_DIR` trust store, all read by
`corral.outbound`. No redirects, cookies or compression: a model API needs none. Everything
that fails below HTTP (connect, proxy, TLS, a timeout, a cut or malformed answer) is a
`TransportError`.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import httpcore

from corral.outbound import environment_proxy, trust_context

_MAX_IDLE = 32
"""Kept-alive connections held per client; more are closed when their exchange ends."""
_FORBIDDEN_IN_HEADERS = ("\r", "\n", "\0")
_HTTPCORE_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
)
_UNANSWERED = "without sending a response"
"""httpcore's words when the server closed the connection before any response head."""


class TransportError(Exception):
    """The exchange failed below HTTP: connect, proxy, TLS, a timeout, or a bad answer."""


class Stalled(TransportError):
    """Nothing arrived (answer head, body bytes) or could be sent for the client's timeout."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"nothing sent for {seconds:g} s")
        self.seconds = seconds


class Response:
    """A response whose head has been read; its body is read through `chunks` or `lines`."""

    def __init__(self, raw: httpcore.Response) -> None:
        self.status = raw.status
        reason = raw.extensions.get("reason_phrase", b"")
        self.reason = reason.decode("latin-1") if isinstance(reason, bytes) else ""
        self.headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw.headers}
        """Header names in lower case; a repeated header keeps its last value."""
        self._raw = raw

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (a stall longer than the client's timeout fails)."""
        async for data in self._raw.aiter_stream():
            yield data

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


class ModelHttpClient:
    """POSTs to one origin over HTTP/1.1, with fixed headers sent on every request."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: float,
        connect_timeout: float,
        env: Mapping[str, str],
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """Args:
        base_url: `http(s)://host[:port][/path]`; request paths are appended to its path.
        headers: sent with every request (names and values must not hold CR, LF or NUL).
        timeout: seconds allowed for each write and between two reads of the answer (the
            stall timeout, `model_stall_timeout_seconds`; past it the call is `Stalled`).
        connect_timeout: seconds allowed to connect (through the proxy, TLS included).
        env: the server's environment, where the proxy variables are read.
        tls: the context for https (default: `corral.outbound.trust_context`).

        Raises:
            ValueError: a malformed base URL or proxy variable, or a header with a line break.
        """
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {base_url!r}")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError(f"a base URL takes no query, fragment or credentials: {base_url!r}")
        port = parts.port  # raises ValueError on a bad port
        for name, value in headers.items():
            if any(c in name or c in value for c in _FORBIDDEN_IN_HEADERS):
                raise ValueError(f"header {name!r} holds a line break or NUL")
        self._host = parts.hostname
        self._port = port or (443 if parts.scheme == "https" else 80)
        self._scheme = parts.scheme.encode()
        self._prefix = parts.path.rstrip("/")
        host_header = f"[{self._host}]" if ":" in self._host else self._host
        if port is not None and port != (443 if parts.scheme == "https" else 80):
            host_header += f":{port}"
        self._headers = [(b"host", host_header.encode("ascii"))]
        self._headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self._timeout = timeout
        self._extensions = {
            "timeout": {"connect": connect_timeout, "read": timeout, "write": timeout}
        }
        self.proxy = environment_proxy(base_url, env)
        """The proxy the environment names for this origin (None: connects directly)."""
        if tls is None and parts.scheme == "https":
            tls = trust_context()
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=tls,
            proxy=self.proxy,
            max_connections=None,
            max_keepalive_connections=_MAX_IDLE,
        )

    @contextlib.asynccontextmanager
    async def post(
        self, path: str, body: bytes, content_type: str = "application/json"
    ) -> AsyncIterator[Response]:
        """Send `body` to the base URL's path + `path`; the response's head has been read
        when this yields. The connection goes back to the pool if the body was read to its
        end, and is closed otherwise (an early exit, an error, a cancellation)."""
        request = httpcore.Request(
            b"POST",
            httpcore.URL(
                scheme=self._scheme,
                host=self._host,
                port=self._port,
                target=f"{self._prefix}{path}".encode(),
            ),
            headers=[
                *self._headers,
                (b"content-type", content_type.encode("latin-1")),
                (b"content-length", str(len(body)).encode()),
            ],
            content=body,
            extensions=self._extensions,
        )
        try:
            raw = await self._send(request)
            try:
                yield Response(raw)
            finally:
                await raw.aclose()
        except _HTTPCORE_ERRORS as exc:
            raise self._error(exc) from exc

    async def aclose(self) -> None:
        """Close the kept-alive connections."""
        await self._pool.aclose()

    async def _send(self, request: httpcore.Request) -> httpcore.Response:
        reused = any(conn.is_idle() for conn in self._pool.connections)
        try:
            return await self._pool.handle_async_request(request)
        except (httpcore.RemoteProtocolError, httpcore.ReadError, httpcore.WriteError) as exc:
            stale = _UNANSWERED in str(exc) or not isinstance(exc, httpcore.RemoteProtocolError)
            if not (reused and stale):
                raise
        # A kept-alive connection the server had closed as the request went out: the request
        # never got an answer, so it is sent once more (the pool opens a new connection for
        # it when no other idle one is left).
        return await self._pool.handle_async_request(request)

    def _error(self, exc: Exception) -> TransportError:
        where = f"{self._host}:{self._port}"
        via = f" through the proxy {self.proxy.url.host.decode()}" if self.proxy else ""
        if isinstance(exc, httpcore.ConnectTimeout):
            return TransportError(f"connecting to {where}{via} timed out")
        if isinstance(exc, httpcore.TimeoutException):
            return Stalled(self._timeout)
        if isinstance(exc, httpcore.ConnectError | httpcore.ProxyError):
            return TransportError(f"cannot connect to {where}{via}: {exc}")
        if _UNANSWERED in str(exc):
            return TransportError("server closed the connection without answering")
        return TransportError(f"{type(exc).__name__}: {exc}")
