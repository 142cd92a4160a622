"""Credential substitution in the egress proxy: placeholders out, secrets in, on the wire.

A sandbox holds only placeholders (`Injection.placeholder`). For requests to a credential's
hosts the proxy replaces the placeholder by the secret in header values and/or the body
(`Injection.header`/`.body`). HTTPS to such a host is terminated here: the upstream TLS
connection is made and verified first (`ssl.create_default_context()`: the server's trust
store, which honours `SSL_CERT_FILE`), then the sandbox is answered `200` and handed a leaf for
the host signed by the environment's CA (`_ca.LeafIssuer`). Every other CONNECT stays an
opaque tunnel; a placeholder sent anywhere else goes out as it is (it is worthless outside).

Requests are parsed as HTTP/1.1 (ALPN offers only `http/1.1`); responses pass through as
bytes. A body is substituted only when its whole is at most `BODY_LIMIT` bytes (buffered, so
a placeholder split across reads or chunks is still found); a larger body, or one after an
`Upgrade`, passes unchanged. A request is substituted only when its `Host` names the tunnel's
host and its target is origin-form, so a shared front end cannot be steered to route the
secret elsewhere. Ambiguous framing (both `Content-Length` and `Transfer-Encoding`, differing
lengths, a coding other than chunked last, folded header lines) closes the connection.

Holds secrets in memory only; never logs, never writes them anywhere but to the upstream.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from corral.hands._ca import LeafIssuer
from corral.hands.base import Injection, Interception

BODY_LIMIT = 1024 * 1024
"""Largest request body searched for placeholders (buffered whole; larger ones stream as is)."""
_HANDSHAKE_TIMEOUT = 30.0
_MAX_TRAILERS = 64
_COPY = 1 << 16
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_HEX = frozenset(b"0123456789abcdefABCDEF")

Spend = Callable[[int], bool]
"""Count bytes taken from the sandbox against its budget; False once it is used up."""
Rewrite = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Spend], Awaitable[bool]]
"""The sandbox-to-upstream half of a relay; False when it stopped on the budget."""


class _Stop(Exception):
    """The request stream cannot be relayed safely (bad framing) or the budget ran out."""


def host_matches(rule: str, host: str) -> bool:
    """An `allowed_hosts` entry against a request host: exact, or `*.suffix` for subdomains
    of suffix (not suffix itself), case-insensitively."""
    rule, host = rule.lower().rstrip("."), host.lower().strip("[]").rstrip(".")
    if rule.startswith("*."):
        return host.endswith(rule[1:]) and len(host) > len(rule) - 1
    return rule == host


@dataclass(frozen=True, slots=True)
class Rules:
    """Which (placeholder, secret) pairs apply to one request's headers and body."""

    header: tuple[tuple[bytes, bytes], ...] = ()
    body: tuple[tuple[bytes, bytes], ...] = ()

    def __repr__(self) -> str:
        return f"Rules(header={len(self.header)}, body={len(self.body)})"


NO_RULES = Rules()


def substitute(data: bytes, pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    """Every placeholder of `pairs` in `data` replaced by its secret, in one pass (a secret
    is never searched again for another placeholder)."""
    if not pairs or not data:
        return data
    table = dict(pairs)
    pattern = re.compile(b"|".join(re.escape(p) for p in sorted(table, key=len, reverse=True)))
    return pattern.sub(lambda m: table[m.group(0)], data)


class Interceptor:
    """One sandbox's credentials, its CA's leaves and the upstream TLS context."""

    def __init__(self, interception: Interception, scratch: Path) -> None:
        """`scratch`: a private server directory (leaves are written there for an instant)."""
        self._injections = interception.injections
        self._issuer = LeafIssuer(
            interception.ca_cert_pem, interception.ca_key_pem.reveal(), scratch
        )
        self._upstream = _upstream_context(
            os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
        )

    def __repr__(self) -> str:
        return f"Interceptor(credentials={len(self._injections)})"

    def _applies(self, injection: Injection, host: str) -> bool:
        return injection.hosts is None or any(host_matches(r, host) for r in injection.hosts)

    def intercepts(self, host: str) -> bool:
        """Whether requests to `host` are opened up (some credential applies to it)."""
        return any(self._applies(i, host) for i in self._injections)

    def rules(self, host: str) -> Rules:
        """The substitutions for requests to `host`. A secret that holds CR, LF or NUL is
        never put in a header (it would split it)."""
        header, body = [], []
        for injection in self._injections:
            if not self._applies(injection, host):
                continue
            pair = (injection.placeholder.encode(), injection.secret.reveal())
            if injection.header and not re.search(b"[\r\n\0]", pair[1]):
                header.append(pair)
            if injection.body:
                body.append(pair)
        return Rules(tuple(header), tuple(body))

    async def open(
        self,
        method: str,
        host: str,
        port: int,
        writer: asyncio.StreamWriter,
        up_writer: asyncio.StreamWriter,
        head: bytes,
    ) -> Rewrite | str:
        """Prepare an intercepted connection; returns the request rewriter for the relay, or
        why the upstream refused (nothing was answered to the sandbox yet).

        CONNECT: TLS to the upstream (verified), then `200`, then TLS to the sandbox with
        a leaf for `host`. Plain HTTP: `head` is the request head to send first.
        """
        rules = self.rules(host)
        if method != "CONNECT":
            return _rewriter(rules, host, port, writer, first=head)
        try:
            await up_writer.start_tls(
                self._upstream, server_hostname=host, ssl_handshake_timeout=_HANDSHAKE_TIMEOUT
            )
        except (OSError, TimeoutError) as e:
            return f"TLS to {host}:{port} failed: {e or 'timed out'}"
        context = self._issuer.context_for(host)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await _serve_tls(writer, context)  # no await before: the ClientHello must reach TLS
        return _rewriter(rules, host, port, writer, first=None)


@functools.lru_cache(maxsize=4)
def _upstream_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """The server's trust store for upstream connections, loaded once per setting of the
    variables it honours (loading costs a tenth of a second of CPU; every sandbox with a
    credential needs it)."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context


async def _serve_tls(writer: asyncio.StreamWriter, context: ssl.SSLContext) -> None:
    """Upgrade the sandbox's connection to TLS as the server. `StreamWriter.start_tls` would
    pick the client side (it goes by how the stream was made), so this does what it does
    with `server_side=True`."""
    loop = asyncio.get_running_loop()
    transport = writer.transport
    protocol = transport.get_protocol()
    new = await loop.start_tls(
        transport, protocol, context, server_side=True, ssl_handshake_timeout=_HANDSHAKE_TIMEOUT
    )
    if new is None:
        raise OSError("TLS to the sandbox did not start")
    setattr(writer, "_transport", new)  # noqa: B010 - as StreamWriter.start_tls does
    getattr(protocol, "_replace_writer")(writer)  # noqa: B009


def _rewriter(
    rules: Rules, host: str, port: int, client: asyncio.StreamWriter, *, first: bytes | None
) -> Rewrite:
    async def rewrite(
        reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter, spend: Spend
    ) -> bool:
        try:
            await relay_requests(
                reader, up_writer, rules, host, port, spend, client=client, first=first
            )
        except _Stop as stop:
            return str(stop) != "budget"
        except ValueError:
            return True  # bad framing: end this half; the relay closes the connection
        if up_writer.can_write_eof():
            up_writer.write_eof()
        return True

    return rewrite


async def relay_requests(
    reader: asyncio.StreamReader,
    up: asyncio.StreamWriter,
    rules: Rules,
    host: str,
    port: int,
    spend: Spend,
    *,
    client: asyncio.StreamWriter | None = None,
    first: bytes | None = None,
) -> None:
    """Forward requests from the sandbox until it closes, substituting per `rules`
    (`client`, the sandbox's side, is told `100 Continue` when the proxy wants the body).

    Raises:
        ValueError: ambiguous or malformed framing.
        _Stop: the budget ran out.
    """
    head = first
    while True:
        if head is None:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    raise ValueError("truncated request head") from None
                return
            _spent(spend, len(head))
        request = _Head.parse(head)
        applied = rules if request.aimed_at(host, port) else NO_RULES
        if await _forward(request, applied, reader, up, spend, client):
            await _copy_all(reader, up, spend)  # upgraded: no longer HTTP
            return
        head = None


@dataclass(slots=True)
class _Head:
    """A request head split into its line and header fields (raw lines, no CRLF)."""

    line: bytes
    fields: list[bytes]

    @classmethod
    def parse(cls, head: bytes) -> _Head:
        line, *fields = head[:-4].split(b"\r\n")
        if any(not f or f[:1] in (b" ", b"\t") or b":" not in f for f in fields):
            raise ValueError("malformed or folded header field")
        return cls(line, fields)

    def values(self, name: bytes) -> list[bytes]:
        return [f.partition(b":")[2].strip() for f in self.fields if _name(f) == name]

    def drop(self, name: bytes) -> None:
        self.fields = [f for f in self.fields if _name(f) != name]

    def aimed_at(self, host: str, port: int) -> bool:
        """Origin-form target and a single `Host` naming the connection's host (and port)."""
        parts = self.line.split(b" ")
        hosts = self.values(b"host")
        if len(parts) != 3 or not parts[1].startswith(b"/") or len(hosts) != 1:
            return False
        value = hosts[0].decode("latin-1").lower()
        if value.startswith("["):
            name, _, rest = value[1:].partition("]")
            given = rest.removeprefix(":")
        else:
            name, _, given = value.partition(":")
        return name.rstrip(".") == host.lower().strip("[]").rstrip(".") and given in (
            "",
            str(port),
        )

    def encode(self, rules: Rules) -> bytes:
        fields = [f if _name(f) == b"host" else _sub_value(f, rules) for f in self.fields]
        return b"\r\n".join([self.line, *fields, b"", b""])


def _name(field: bytes) -> bytes:
    return field.partition(b":")[0].strip().lower()


def _sub_value(field: bytes, rules: Rules) -> bytes:
    name, colon, value = field.partition(b":")
    return name + colon + substitute(value, rules.header)


def _spent(spend: Spend, n: int) -> None:
    if not spend(n):
        raise _Stop("budget")


async def _forward(
    request: _Head, rules: Rules, reader: asyncio.StreamReader, up: asyncio.StreamWriter,
    spend: Spend, client: asyncio.StreamWriter | None,
) -> bool:  # fmt: skip
    """Send one request (head and body) upstream; True when it asks for an upgrade."""
    lengths = set(request.values(b"content-length"))
    codings = b",".join(request.values(b"transfer-encoding")).lower()
    if lengths and codings:
        raise ValueError("both Content-Length and Transfer-Encoding")
    upgrade = bool(request.values(b"upgrade")) or request.line.startswith(b"CONNECT ")
    if codings:
        if codings.split(b",")[-1].strip() != b"chunked":
            raise ValueError("a transfer coding other than chunked last")
        await _forward_chunked(request, rules, reader, up, spend, client)
    elif lengths:
        if len(lengths) > 1 or not all(v.isdigit() for v in lengths):
            raise ValueError("bad Content-Length")
        await _forward_sized(request, rules, int(lengths.pop()), reader, up, spend, client)
    else:
        up.write(request.encode(rules))
        await up.drain()
    return upgrade


def _take_expect(request: _Head, client: asyncio.StreamWriter | None) -> None:
    """Answer `Expect: 100-continue` here: the body must be read before the head can go
    (its length may change). Only a client pipelining requests behind an unanswered one
    could see this interim answer before an earlier response; clients do not do that."""
    if any(v.lower() == b"100-continue" for v in request.values(b"expect")):
        request.drop(b"expect")
        if client is not None:
            client.write(_CONTINUE)


async def _forward_sized(
    request: _Head, rules: Rules, length: int, reader: asyncio.StreamReader,
    up: asyncio.StreamWriter, spend: Spend, client: asyncio.StreamWriter | None,
) -> None:  # fmt: skip
    if rules.body and length <= BODY_LIMIT:
        _take_expect(request, client)
        body = await reader.readexactly(length)
        _spent(spend, length)
        body = substitute(body, rules.body)
        request.drop(b"content-length")
        request.fields.append(b"Content-Length: %d" % len(body))
        up.write(request.encode(rules) + body)
        await up.drain()
        return
    up.write(request.encode(rules))
    await _copy_exact(reader, up, length, spend)


async def _forward_chunked(
    request: _Head, rules: Rules, reader: asyncio.StreamReader, up: asyncio.StreamWriter,
    spend: Spend, client: asyncio.StreamWriter | None,
) -> None:  # fmt: skip
    """Buffer the whole chunked body when it may need substituting and fits BODY_LIMIT, and
    send it as one chunk; otherwise (or once it outgrows the limit) relay chunks as they are."""
    if not rules.body:
        up.write(request.encode(rules))
        await _copy_chunks(reader, up, spend)
        return
    _take_expect(request, client)
    raw: list[bytes] = []
    data: list[bytes] = []
    held = 0
    while True:
        line, size = await _chunk_line(reader, spend)
        if size == 0:
            trailers = await _trailers(reader, spend)
            body = substitute(b"".join(data), rules.body)
            chunk = b"%x\r\n%s\r\n" % (len(body), body) if body else b""
            up.write(request.encode(rules) + chunk + b"0\r\n" + trailers)
            await up.drain()
            return
        if held + size > BODY_LIMIT:  # too big to search: send what came as it came
            up.write(request.encode(rules) + b"".join(raw) + line)
            await _copy_exact(reader, up, size + 2, spend)
            await _copy_chunks(reader, up, spend)
            return
        piece = await reader.readexactly(size + 2)
        _spent(spend, len(piece))
        if piece[-2:] != b"\r\n":
            raise ValueError("chunk without CRLF")
        raw += (line, piece)
        data.append(piece[:-2])
        held += size


async def _chunk_line(reader: asyncio.StreamReader, spend: Spend) -> tuple[bytes, int]:
    line = await reader.readuntil(b"\r\n")
    _spent(spend, len(line))
    size = line[:-2].split(b";", 1)[0].strip()
    if not size or len(size) > 15 or not set(size) <= _HEX:
        raise ValueError("bad chunk size")
    return line, int(size, 16)


async def _trailers(reader: asyncio.StreamReader, spend: Spend) -> bytes:
    """The trailer section after the last chunk, through its closing blank line."""
    lines = []
    for _ in range(_MAX_TRAILERS):
        line = await reader.readuntil(b"\r\n")
        _spent(spend, len(line))
        lines.append(line)
        if line == b"\r\n":
            return b"".join(lines)
    raise ValueError("too many trailer fields")


async def _copy_chunks(
    reader: asyncio.StreamReader, up: asyncio.StreamWriter, spend: Spend
) -> None:
    while True:
        line, size = await _chunk_line(reader, spend)
        up.write(line)
        if size == 0:
            up.write(await _trailers(reader, spend))
            await up.drain()
            return
        await _copy_exact(reader, up, size + 2, spend)


async def _copy_exact(
    reader: asyncio.StreamReader, up: asyncio.StreamWriter, n: int, spend: Spend
) -> None:
    while n > 0:
        data = await reader.read(min(n, _COPY))
        if not data:
            raise ValueError("body cut short")
        _spent(spend, len(data))
        n -= len(data)
        up.write(data)
        await up.drain()


async def _copy_all(reader: asyncio.StreamReader, up: asyncio.StreamWriter, spend: Spend) -> None:
    while data := await reader.read(_COPY):
        _spent(spend, len(data))
        up.write(data)
        await up.drain()
