"""The egress proxy on its own (no sandbox): host policy, CONNECT/GET forwarding, refusals."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.hands._egress import EgressProxy, HostPolicy

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("example.com", True),
        ("EXAMPLE.com.", True),
        ("api.example.com", False),
        ("pypi.org", False),
        ("files.pythonhosted.org", True),
        ("a.b.pythonhosted.org", True),
        ("pythonhosted.org", False),
        ("evilpythonhosted.org", False),
        ("[::1]", True),
        ("", False),
    ],
)
def test_host_policy(host: str, allowed: bool) -> None:
    policy = HostPolicy(["example.com", "*.pythonhosted.org", "::1", " "])
    assert policy.allows(host) is allowed


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    if head.startswith(b"PING"):  # raw tunnel traffic
        writer.write(b"PONG " + head)
    else:
        body = b"upstream saw: " + head.split(b"\r\n")[0]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    writer.close()


@pytest.fixture
async def upstream() -> AsyncIterator[int]:
    server = await asyncio.start_server(_upstream, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
async def proxy_socket(tmp_path: Path) -> AsyncIterator[Path]:
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # longer than sun_path allows
    deep.mkdir(parents=True)
    proxy = EgressProxy(HostPolicy(["127.0.0.1"]))
    await proxy.start(deep / "egress.sock")
    yield deep / "egress.sock"
    await proxy.aclose()


async def connect(socket_path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    dir_fd = os.open(socket_path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        return await asyncio.open_unix_connection(f"/proc/self/fd/{dir_fd}/{socket_path.name}")
    finally:
        os.close(dir_fd)


async def exchange(socket_path: Path, request: bytes) -> bytes:
    reader, writer = await connect(socket_path)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
    writer.close()
    return data


async def test_get_is_forwarded_in_origin_form(proxy_socket: Path, upstream: int) -> None:
    request = (
        f"GET http://127.0.0.1:{upstream}/a?b=1 HTTP/1.1\r\nHost: x\r\n"
        "Proxy-Authorization: secret\r\n\r\n"
    ).encode()
    reply = await exchange(proxy_socket, request)
    assert reply.startswith(b"HTTP/1.1 200 OK")
    assert reply.endswith(b"upstream saw: GET /a?b=1 HTTP/1.1")


async def test_connect_opens_a_tunnel(proxy_socket: Path, upstream: int) -> None:
    reader, writer = await connect(proxy_socket)
    writer.write(f"CONNECT 127.0.0.1:{upstream} HTTP/1.1\r\n\r\n".encode())
    assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
    writer.write(b"PING\r\n\r\n")
    assert await reader.read() == b"PONG PING\r\n\r\n"
    writer.close()


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        ("GET http://example.com/ HTTP/1.1", b"403"),
        ("CONNECT example.com:443 HTTP/1.1", b"403"),
        ("CONNECT localhost:443 HTTP/1.1", b"403"),
        ("POST http://127.0.0.1:1/ HTTP/1.1", b"405"),
        ("GET /relative HTTP/1.1", b"400"),
        ("GET https://127.0.0.1/ HTTP/1.1", b"400"),
        ("garbage", b"400"),
        ("GET http://127.0.0.1:1/ HTTP/1.1", b"502"),
    ],
)
async def test_refusals(proxy_socket: Path, request_line: str, status: bytes) -> None:
    reply = await exchange(proxy_socket, f"{request_line}\r\n\r\n".encode())
    assert reply.split(b" ")[1] == status
    assert b"corral egress proxy" in reply
