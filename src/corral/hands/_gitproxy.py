"""The host-side git forwarder: how `git fetch`/`pull`/`push` inside a sandbox reach a
repository resource's remote without the sandbox ever holding its token.

A cloned repository's config maps its remote URL (`url.<local>.insteadOf`) to
`http://git.corral.invalid/<resource id>`, a name that exists nowhere (`.invalid` is reserved)
and that the sandbox's egress proxy hands to this forwarder instead of resolving it. The
forwarder accepts only git's smart-HTTP requests (`info/refs?service=...`, `git-upload-pack`,
`git-receive-pack`) under a known resource's prefix, sends them to that resource's URL and no
other (through `corral.outbound.guarded_client`: the operator's address rules, no redirects),
drops every header but the few git needs (so no `Authorization` or cookie the sandbox sends
goes out) and adds `Authorization` with the token read *now* (`TokenSource`), so a rotation
applies to the next request. Answers are streamed back with `Connection: close`.

Never logs a header or a token; must not import session, store or anything above hands.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from urllib.parse import urlsplit

import httpx

from corral.hands.base import Repository
from corral.netpolicy import AddressPolicy
from corral.outbound import OutboundRefused, guarded_client

__all__ = ["GIT_HOST", "GitForwarder", "TokenSource", "basic_auth", "local_url"]

log = logging.getLogger("corral.hands.git")
GIT_HOST = "git.corral.invalid"
"""The name sandboxes use for the forwarder; reserved (RFC 6761), so never a real host."""
TokenSource = Callable[[str], Awaitable[str | None]]
"""Resource id -> its current token (None: use the repository without one)."""

MAX_BODY = 2 * 1024**3
"""Largest request body (a push) relayed."""
_CHUNK = 1 << 16
_SERVICES = ("git-upload-pack", "git-receive-pack")
_REQUEST_HEADERS = frozenset(
    {"accept", "accept-encoding", "accept-language", "content-encoding", "content-type",
     "git-protocol", "pragma", "user-agent"}
)  # fmt: skip
_RESPONSE_HEADERS = frozenset(
    {"cache-control", "content-encoding", "content-type", "expires", "pragma"}
)
_TIMEOUT = httpx.Timeout(30.0, read=300.0, write=300.0)


def local_url(resource_id: str) -> str:
    """The URL a sandbox's git uses for the resource (no secret in it)."""
    return f"http://{GIT_HOST}/{resource_id}"


def basic_auth(token: str) -> str:
    """The `Authorization` value for a token: Basic with the `x-access-token` user, which
    GitHub takes for every token kind and plain git servers read as user + password."""
    raw = base64.b64encode(f"x-access-token:{token}".encode()).decode("ascii")
    return f"Basic {raw}"


class _Refusal(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class GitForwarder:
    """One sandbox's git forwarder, for the repositories of its recipe."""

    def __init__(
        self, repositories: Sequence[Repository], tokens: TokenSource, policy: AddressPolicy
    ) -> None:
        self._routes = {r.resource_id: r.url.rstrip("/") for r in repositories}
        self._tokens = tokens
        self._client = guarded_client(policy, follow_redirects=False, timeout=_TIMEOUT)

    @staticmethod
    def claims(host: str) -> bool:
        """Whether a proxied request's host is the forwarder's name."""
        return host.strip().rstrip(".").lower() == GIT_HOST

    async def aclose(self) -> None:
        """Close upstream connections."""
        await self._client.aclose()

    async def serve(
        self,
        method: str,
        target: str,
        header_lines: list[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Answer one proxied request (the head is read; the body, if any, is in `reader`)."""
        try:
            resource_id, upstream = self._route(method, target)
            headers = _request_headers(header_lines)
            body = None
            if method == "POST":
                body = await _body(headers, reader, writer)
            await self._forward(resource_id, method, upstream, headers, body, writer)
        except _Refusal as refusal:
            writer.write(_plain(refusal.status, str(refusal)))
        except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return  # a malformed or truncated body: nothing sensible to answer
        await writer.drain()

    def _route(self, method: str, target: str) -> tuple[str, str]:
        """(resource id, upstream URL) of a smart-HTTP request, or a refusal."""
        url = urlsplit(target)
        resource_id, _, rest = url.path.lstrip("/").partition("/")
        base = self._routes.get(resource_id)
        if base is None:
            raise _Refusal("404 Not Found", "no repository of this session has that address")
        suffix = "/" + rest
        if method == "GET" and suffix == "/info/refs":
            if url.query not in (f"service={s}" for s in _SERVICES):
                raise _Refusal("403 Forbidden", "only smart HTTP is forwarded")
            return resource_id, f"{base}{suffix}?{url.query}"
        if method == "POST" and suffix in (f"/{s}" for s in _SERVICES) and not url.query:
            return resource_id, base + suffix
        raise _Refusal("403 Forbidden", f"{method} {suffix} is not a git smart-HTTP request")

    async def _forward(
        self,
        resource_id: str,
        method: str,
        upstream: str,
        headers: dict[str, str],
        body: AsyncIterator[bytes] | None,
        writer: asyncio.StreamWriter,
    ) -> None:
        out = {k: v for k, v in headers.items() if k in _REQUEST_HEADERS}
        if "content-length" in headers:
            out["content-length"] = headers["content-length"]
        try:
            token = await self._tokens(resource_id)
        except Exception:  # e.g. its vault key is no longer configured: say so, never crash
            log.exception("reading the token of repository resource %s", resource_id)
            raise _Refusal("502 Bad Gateway", "the repository's token cannot be read") from None
        if token is not None:
            out["authorization"] = basic_auth(token)
        request = self._client.build_request(method, upstream, headers=out, content=body)
        try:
            response = await self._client.send(request, stream=True)
        except OutboundRefused as exc:
            raise _Refusal("403 Forbidden", f"the repository's host is refused: {exc}") from None
        except httpx.HTTPError as exc:
            raise _Refusal("502 Bad Gateway", f"the repository's host failed: {exc!r}") from None
        try:
            log.info("git %s %s -> %d", method, upstream, response.status_code)
            writer.write(_response_head(response))
            async for chunk in response.aiter_raw(_CHUNK):
                writer.write(chunk)
                await writer.drain()
        except httpx.HTTPError:
            pass  # the head is out: closing the connection is the only way left to say so
        finally:
            await response.aclose()


def _request_headers(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.decode("latin-1").partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return headers


async def _body(
    headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> AsyncIterator[bytes]:
    """The request body as git sent it: a Content-Length or chunked."""
    chunked = headers.get("transfer-encoding", "").lower() == "chunked"
    length = headers.get("content-length")
    if not chunked and (length is None or not length.isdigit()):
        raise _Refusal("411 Length Required", "a POST needs a body length")
    if not chunked and int(length or 0) > MAX_BODY:
        raise _Refusal("413 Content Too Large", f"bodies are limited to {MAX_BODY} bytes")
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    if chunked:
        headers.pop("content-length", None)
        return _chunked(reader)
    return _sized(reader, int(length or 0))


async def _sized(reader: asyncio.StreamReader, length: int) -> AsyncIterator[bytes]:
    left = length
    while left > 0:
        data = await reader.read(min(left, _CHUNK))
        if not data:
            raise asyncio.IncompleteReadError(b"", left)
        left -= len(data)
        yield data


async def _chunked(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"x", 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers
            return
        total += size
        if total > MAX_BODY:
            raise asyncio.IncompleteReadError(b"", None)
        async for data in _sized(reader, size):
            yield data
        await reader.readexactly(2)


def _response_head(response: httpx.Response) -> bytes:
    lines = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
    lines += [f"{k}: {v}" for k, v in response.headers.items() if k.lower() in _RESPONSE_HEADERS]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _plain(status: str, message: str) -> bytes:
    body = f"corral git forwarder: {message}\n".encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    return head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body
