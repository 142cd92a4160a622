"""HTTP(S) egress proxy for sandboxes, in the server, on one unix socket per sandbox.

Sandboxes never share the host's network namespace: this proxy is their only way out.
`limited`: CONNECT/GET to allowed hosts (exact or `*.suffix`), 403 otherwise.
`unrestricted`: any method to any host. In both, the name is resolved once and every address
is checked by `corral.netpolicy` (public, not this host's own, embedded IPv4 included; the
server's database and API listen on the host), and the connection goes to a checked address,
never to the name again (no DNS rebinding). A private destination is reachable only when the
environment lists the host and the operator lists the destination in `[egress] allow_private`.

Budgets per sandbox, so one sandbox cannot exhaust the server: at most `max_connections`
connections at once (one more is answered 429 and closed at once), `bytes_budget` bytes relayed
over its life (then 403), 30 s to send a request head, `idle_seconds` without traffic on a
relayed connection, two DNS lookups in flight.

Descriptor arithmetic: a connection holds its client socket and at most one upstream socket,
so one sandbox's proxy holds at most 2 * max_connections + 2 descriptors (the listener and a
connection being refused) — 130 with the default 64 — plus DNS sockets of the shared
8-thread resolver pool (`netpolicy`). `corral serve`/`worker` raise RLIMIT_NOFILE's soft limit
to the hard one (commonly 524288 or more), so e.g. 1000 sandboxes with saturated proxies need
about 130k descriptors and still leave the API and the database theirs. With a low hard limit
N, keep sandboxes * 130 well below N (or lower `max_connections`).

Credentials (`environment_variable`) are substituted by `_intercept.Interceptor` for the
hosts they name, which it opens up (TLS terminated with the environment's CA); the proxy
hands it those connections after the usual host and address checks. Holds credentials only
in that interceptor's memory; must not import session, store or anything above hands.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from corral.hands._intercept import Interceptor, Rewrite
from corral.netpolicy import (
    AddressPolicy,
    EgressSettings,
    check_destination,
    is_public,
    resolve,
)

__all__ = ["PACKAGE_MANAGER_HOSTS", "EgressProxy", "HostPolicy", "Resolver", "is_public"]

PACKAGE_MANAGER_HOSTS = (
    "pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "registry.yarnpkg.com",
    "crates.io", "static.crates.io", "index.crates.io", "proxy.golang.org", "sum.golang.org",
    "rubygems.org", "repo.maven.apache.org", "repo1.maven.org", "deb.debian.org",
    "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com",
)  # fmt: skip
_HEAD_LIMIT = 64 * 1024
_HEAD_TIMEOUT = 30.0
_CONNECT_TIMEOUT = 15.0
_RESOLVE_TIMEOUT = 10.0
_LOOKUPS = 2
"""DNS lookups in flight per sandbox."""
_BACKLOG = 64
_DROPPED_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


def _norm(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


Resolver = Callable[[str, int], Awaitable[list[str]]]
"""Every address of (host, port), looked up once; raises OSError when it does not resolve."""


class GitRoute(Protocol):
    """Where requests to the git forwarder's name go (`hands._gitproxy.GitForwarder`)."""

    def claims(self, host: str) -> bool: ...

    async def serve(
        self,
        method: str,
        target: str,
        header_lines: list[bytes],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None: ...


class HostPolicy:
    """Allowed hosts: exact names/IPs, or `*.example.com` for any subdomain of example.com.

    With `public=True` (networking `unrestricted`) any host with only public addresses is
    allowed too, and any method may be used.
    """

    def __init__(self, allowed: Iterable[str], *, public: bool = False) -> None:
        rules = [_norm(h) for h in allowed if h.strip()]
        self.exact = frozenset(r for r in rules if not r.startswith("*."))
        self.suffixes = tuple("." + r[2:] for r in rules if r.startswith("*."))
        self.public = public

    def allows(self, host: str) -> bool:
        """Explicitly listed (the name; its addresses are checked separately)."""
        host = _norm(host)
        return bool(host) and (host in self.exact or host.endswith(self.suffixes))


def _response(status: str, message: str) -> bytes:
    body = f"corral egress proxy: {message}\n".encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    return head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body


def _split_authority(authority: str, default_port: int) -> tuple[str, int]:
    parsed = urlsplit("//" + authority)
    return parsed.hostname or "", parsed.port or default_port


def _parse_target(method: str, target: str) -> tuple[str, int, str]:
    """(host, port, origin-form path) of a proxy request.

    Raises:
        ValueError: not an absolute `http://` URL or `host:port` authority.
    """
    if method == "CONNECT":
        host, port = _split_authority(target, 443)
        return host, port, ""
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError("only absolute http:// URLs (or CONNECT for https) are proxied")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    return url.hostname, url.port or 80, path


def _rewrite_head(method: str, path: str, version: str, header_lines: list[bytes]) -> bytes:
    kept = [h for h in header_lines if h.split(b":", 1)[0].strip().lower() not in _DROPPED_HEADERS]
    first = f"{method} {path} {version}".encode()
    return b"\r\n".join([first, *kept, b"Connection: close", b"", b""])


def _bind_unix(path: Path) -> socket.socket:
    """A listening-ready unix socket at `path`, bound through /proc/self/fd to dodge the
    108-byte `sun_path` limit (state directories can be deep)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dir_fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        sock.bind(f"/proc/self/fd/{dir_fd}/{path.name}")
        os.chmod(path, 0o666)
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(dir_fd)
    return sock


class EgressProxy:
    """One sandbox's proxy: a unix-socket server enforcing a `HostPolicy`, the operator's
    address rules and the sandbox's connection and byte budgets."""

    def __init__(
        self,
        policy: HostPolicy,
        *,
        settings: EgressSettings | None = None,
        resolver: Resolver = resolve,
        interceptor: Interceptor | None = None,
        git: GitRoute | None = None,
    ) -> None:
        """`resolver` looks a name up once per request (tests pass a stand-in for DNS);
        `interceptor` substitutes credentials on the hosts it claims; `git` takes the
        requests for its name (`hands._gitproxy`) before any policy check.

        Raises:
            ValueError: a malformed `allow_private` entry.
        """
        self.policy = policy
        self.settings = settings or EgressSettings()
        self.addresses = AddressPolicy.from_entries(self.settings.allow_private)
        self.bytes_used = 0
        """Bytes relayed so far, both directions, all connections."""
        self._resolver = resolver
        self.interceptor = interceptor
        self.git = git
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._lookups = asyncio.Semaphore(_LOOKUPS)

    async def start(self, socket_path: Path) -> None:
        """Listen on `socket_path` (a new file; any length, unlike a plain AF_UNIX bind)."""
        listener = _bind_unix(socket_path)
        listener.listen(_BACKLOG)
        listener.setblocking(False)
        self._listener = listener
        self._accepting = asyncio.create_task(self._accept_loop(listener))

    async def aclose(self) -> None:
        """Stop accepting and close every connection (client and upstream sockets)."""
        tasks = [t for t in (self._accepting, *self._handlers) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        if self._listener is not None:
            self._listener.close()

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Accept one connection at a time; beyond `max_connections` answer 429 and close at
        once, so this sandbox never holds more than its share of the server's descriptors."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError:  # EMFILE/ENFILE: the process is short of descriptors; back off
                await asyncio.sleep(0.1)
                continue
            if len(self._handlers) >= self.settings.max_connections:
                limit = self.settings.max_connections
                _answer_and_close(
                    conn,
                    _response(
                        "429 Too Many Requests",
                        f"too many concurrent connections from this sandbox (limit {limit})",
                    ),
                )
            else:
                task = asyncio.create_task(self._handle(conn))
                self._handlers.add(task)
                task.add_done_callback(self._handlers.discard)
            await asyncio.sleep(0)  # sock_accept does not yield while clients are queued

    async def _handle(self, conn: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(sock=conn, limit=_HEAD_LIMIT)
        except OSError:
            conn.close()
            return
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
        request_line, *header_lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ")
            host, port, path = _parse_target(method, target)
        except ValueError as e:
            writer.write(_response("400 Bad Request", str(e) or "malformed request line"))
            return
        if self.git is not None and method != "CONNECT" and self.git.claims(host):
            await self.git.serve(method, target, header_lines, reader, writer)
            return
        refusal = self._check_request(method, host)
        addresses: tuple[str, ...] = ()
        if refusal is None:
            addresses, refusal = await self._admit(host, port)
        if refusal is not None:
            writer.write(refusal)
            return
        try:
            up_reader, up_writer = await _connect(addresses, port)
        except (OSError, TimeoutError) as e:
            writer.write(
                _response("502 Bad Gateway", f"cannot connect to {host}:{port}: {e or 'timed out'}")
            )
            return
        try:
            rewrite: Rewrite | None = None
            if self.interceptor is not None and self.interceptor.intercepts(host):
                head = _rewrite_head(method, path, version, header_lines)
                opened = await self.interceptor.open(method, host, port, writer, up_writer, head)
                if isinstance(opened, str):
                    writer.write(_response("502 Bad Gateway", opened))
                    return
                rewrite = opened
            elif method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(_rewrite_head(method, path, version, header_lines))
            await self._relay(reader, writer, up_reader, up_writer, rewrite)
        finally:
            up_writer.close()

    def _check_request(self, method: str, host: str) -> bytes | None:
        """The refusal for this method and host name before any lookup, or None."""
        if self.bytes_used >= self.settings.bytes_budget:
            budget = self.settings.bytes_budget
            return _response(
                "403 Forbidden", f"this sandbox's egress budget of {budget} bytes is used up"
            )
        if self.policy.public:
            return None
        if method not in ("CONNECT", "GET"):
            return _response("405 Method Not Allowed", f"{method} is not allowed")
        if not self.policy.allows(host):
            return _response("403 Forbidden", f"host {host!r} is not in allowed_hosts")
        return None

    async def _admit(self, host: str, port: int) -> tuple[tuple[str, ...], bytes | None]:
        """Resolve once and decide on the addresses: (addresses to connect to, refusal)."""
        try:
            resolved = await self._resolve(host, port)
        except (OSError, TimeoutError) as e:
            return (), _response("502 Bad Gateway", f"cannot resolve {host}: {e or 'timed out'}")
        listed = self.policy.allows(host)
        # The operator's private destinations open only to environments that name the host.
        rules = self.addresses if listed else self.addresses.public_only()
        decision = check_destination(host, port, resolved, rules)
        if decision.allowed:
            return decision.addresses, None
        hint = " unless the operator lists the destination in [egress] allow_private"
        message = (
            f"host {host!r} refused: {decision.reason}; sandboxes may only reach public "
            f"addresses{hint if listed else ''}"
        )
        return (), _response("403 Forbidden", message)

    async def _resolve(self, host: str, port: int) -> list[str]:
        """One lookup, at most `_LOOKUPS` in flight per sandbox even after timeouts (a slot
        is freed when the lookup itself ends), so one sandbox cannot hog the resolver pool."""
        await self._lookups.acquire()
        lookup = asyncio.ensure_future(self._resolver(host, port))
        lookup.add_done_callback(self._lookup_done)
        return await asyncio.wait_for(asyncio.shield(lookup), _RESOLVE_TIMEOUT)

    def _lookup_done(self, lookup: asyncio.Future[list[str]]) -> None:
        self._lookups.release()
        if not lookup.cancelled():
            lookup.exception()  # retrieved: a lookup that outlived its request must not log

    async def _relay(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
        rewrite: Rewrite | None = None,
    ) -> None:
        """Copy both ways until both ends finish, the connection is idle for `idle_seconds`
        (no bytes either way) or the sandbox's byte budget runs out. `rewrite`, when given,
        carries the sandbox's side instead of a plain copy (credential substitution)."""
        loop = asyncio.get_running_loop()
        activity = _Activity(loop.time())
        outbound = (
            self._pipe(reader, up_writer, activity)
            if rewrite is None
            else rewrite(reader, up_writer, lambda n: self._spend(n, activity))
        )
        pending = {
            asyncio.ensure_future(outbound),
            asyncio.ensure_future(self._pipe(up_reader, writer, activity)),
        }
        try:
            while pending:
                left = activity.last + self.settings.idle_seconds - loop.time()
                if left <= 0:
                    return
                done, pending = await asyncio.wait(
                    pending, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                if any(not t.result() for t in done):
                    return
        finally:
            for task in pending:
                task.cancel()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, activity: _Activity
    ) -> bool:
        """Copy until EOF; False when the byte budget ran out (the chunk is not forwarded)."""
        with contextlib.suppress(OSError, RuntimeError):
            while data := await reader.read(1 << 16):
                if not self._spend(len(data), activity):
                    return False
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        return True

    def _spend(self, n: int, activity: _Activity) -> bool:
        """Count `n` relayed bytes; False once the byte budget is exceeded."""
        self.bytes_used += n
        activity.last = asyncio.get_running_loop().time()
        return self.bytes_used <= self.settings.bytes_budget


class _Activity:
    """When a relayed connection last carried bytes (either way)."""

    __slots__ = ("last",)

    def __init__(self, now: float) -> None:
        self.last = now


async def _connect(
    addresses: tuple[str, ...], port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the first checked address that answers; numeric only, never a lookup."""
    errors: list[str] = []
    async with asyncio.timeout(_CONNECT_TIMEOUT):
        for address in addresses:
            try:
                return await asyncio.open_connection(
                    address, port, flags=socket.AI_NUMERICHOST, limit=_HEAD_LIMIT
                )
            except OSError as e:
                errors.append(f"{address}: {e.strerror or e}")
    raise OSError("; ".join(errors))


def _answer_and_close(conn: socket.socket, response: bytes) -> None:
    """Best-effort answer without waiting; reading what the client sent first keeps the
    close from resetting the connection before it reads the answer."""
    conn.setblocking(False)
    with contextlib.suppress(OSError):
        conn.recv(_HEAD_LIMIT)
    with contextlib.suppress(OSError):
        conn.send(response)
    conn.close()
