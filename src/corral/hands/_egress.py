"""HTTP(S) egress proxy for sandboxes, in the server, on one unix socket per sandbox.

Sandboxes never share the host's network namespace: this proxy is their only way out.
`limited`: CONNECT/GET to allowed hosts (exact or `*.suffix`), 403 otherwise.
`unrestricted`: any method to any host whose every address is public; loopback, private,
link-local and other internal addresses are refused (the server's database and API listen
there), and the connection goes to the address that was checked (no DNS rebinding).
Holds no credentials.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

PACKAGE_MANAGER_HOSTS = (
    "pypi.org", "files.pythonhosted.org", "registry.npmjs.org", "registry.yarnpkg.com",
    "crates.io", "static.crates.io", "index.crates.io", "proxy.golang.org", "sum.golang.org",
    "rubygems.org", "repo.maven.apache.org", "repo1.maven.org", "deb.debian.org",
    "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com",
)  # fmt: skip
_HEAD_LIMIT = 64 * 1024
_HEAD_TIMEOUT = 30.0
_CONNECT_TIMEOUT = 15.0
_DROPPED_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


def _norm(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


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
        """Explicitly listed (reachable whatever its address)."""
        host = _norm(host)
        return bool(host) and (host in self.exact or host.endswith(self.suffixes))


def is_public(address: str) -> bool:
    """Whether an IP address is globally routable (not loopback/private/link-local/…)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def public_address(host: str, port: int) -> str | None:
    """The first address of `host` if every address it resolves to is public, else None."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses or not all(is_public(a) for a in addresses):
        return None
    return addresses[0]


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
    """One sandbox's proxy: an asyncio unix-socket server enforcing a `HostPolicy`."""

    def __init__(self, policy: HostPolicy) -> None:
        self.policy = policy
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self, socket_path: Path) -> None:
        """Listen on `socket_path` (a new file; any length, unlike a plain AF_UNIX bind)."""
        self._server = await asyncio.start_unix_server(
            self._handle, sock=_bind_unix(socket_path), limit=_HEAD_LIMIT
        )

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        self._writers.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _admit(
        self, writer: asyncio.StreamWriter, method: str, host: str, port: int
    ) -> str | None:
        """Where to connect for this request, or None after writing the refusal."""
        if self.policy.allows(host):
            if method not in ("CONNECT", "GET") and not self.policy.public:
                await _refuse(writer, "405 Method Not Allowed", f"{method} is not allowed")
                return None
            return host
        if not self.policy.public:
            if method not in ("CONNECT", "GET"):
                await _refuse(writer, "405 Method Not Allowed", f"{method} is not allowed")
            else:
                await _refuse(writer, "403 Forbidden", f"host {host!r} is not in allowed_hosts")
            return None
        address = await public_address(host, port)
        if address is None:
            await _refuse(
                writer,
                "403 Forbidden",
                f"host {host!r} is internal or does not resolve; sandboxes may only "
                "reach public addresses",
            )
        return address

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _HEAD_TIMEOUT)
        request_line, *header_lines = head[:-4].split(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ")
            host, port, path = _parse_target(method, target)
        except ValueError as e:
            writer.write(_response("400 Bad Request", str(e) or "malformed request line"))
            return
        target_address = await self._admit(writer, method, host, port)
        if target_address is None:
            return
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(target_address, port), _CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as e:
            writer.write(_response("502 Bad Gateway", f"cannot connect to {host}:{port}: {e}"))
            return
        self._writers.add(up_writer)
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(_rewrite_head(method, path, version, header_lines))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()


async def _refuse(writer: asyncio.StreamWriter, status: str, message: str) -> None:
    writer.write(_response(status, message))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
