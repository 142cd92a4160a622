"""The egress proxy on its own (no sandbox): host policy, CONNECT/GET forwarding, refusals,
decisions on resolved addresses, and the per-sandbox budgets."""

from __future__ import annotations

import asyncio
import http.server
import ipaddress
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.hands._egress import EgressProxy, HostPolicy, Resolver
from corral.netpolicy import EgressSettings, resolve

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
    # The test's "internet" is the loopback, which the operator must open explicitly.
    proxy = EgressProxy(
        HostPolicy(["127.0.0.1"]), settings=EgressSettings(allow_private=("127.0.0.1",))
    )
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


async def started(
    tmp_path: Path,
    name: str,
    policy: HostPolicy,
    *,
    settings: EgressSettings | None = None,
    resolver: Resolver = resolve,
) -> EgressProxy:
    proxy = EgressProxy(policy, settings=settings, resolver=resolver)
    await proxy.start(tmp_path / name)
    return proxy


async def test_limited_refuses_an_allowed_name_at_a_private_address(
    tmp_path: Path, upstream: int
) -> None:
    proxy = await started(tmp_path, "p.sock", HostPolicy(["localhost"]))
    try:
        for request in (
            f"CONNECT localhost:{upstream} HTTP/1.1\r\n\r\n",
            f"GET http://localhost:{upstream}/ HTTP/1.1\r\n\r\n",
        ):
            reply = await exchange(tmp_path / "p.sock", request.encode())
            assert reply.startswith(b"HTTP/1.1 403"), reply
            assert b"127.0.0.1 is one of this host's own addresses" in reply
            assert b"unless the operator lists the destination in [egress] allow_private" in reply
            assert b"upstream saw" not in reply
    finally:
        await proxy.aclose()


async def test_allow_private_opens_a_name_the_environment_lists(
    tmp_path: Path, upstream: int
) -> None:
    settings = EgressSettings(allow_private=("localhost",))
    proxy = await started(tmp_path, "p.sock", HostPolicy(["localhost"]), settings=settings)
    try:
        request = f"GET http://localhost:{upstream}/a HTTP/1.1\r\nHost: localhost\r\n\r\n"
        reply = await exchange(tmp_path / "p.sock", request.encode())
        assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b"saw: GET /a HTTP/1.1")
    finally:
        await proxy.aclose()


async def test_allow_private_alone_opens_nothing(tmp_path: Path, upstream: int) -> None:
    """Both keys are needed: the operator's rule and the environment naming the host."""
    settings = EgressSettings(allow_private=("127.0.0.1",))
    unrestricted = await started(tmp_path, "u.sock", HostPolicy([], public=True), settings=settings)
    limited = await started(tmp_path, "l.sock", HostPolicy(["other.example"]), settings=settings)
    try:
        request = f"GET http://127.0.0.1:{upstream}/ HTTP/1.1\r\n\r\n".encode()
        reply = await exchange(tmp_path / "u.sock", request)
        assert reply.startswith(b"HTTP/1.1 403") and b"only reach public addresses" in reply
        reply = await exchange(tmp_path / "l.sock", request)
        assert reply.startswith(b"HTTP/1.1 403") and b"not in allowed_hosts" in reply
    finally:
        await unrestricted.aclose()
        await limited.aclose()


async def test_the_connection_goes_to_the_checked_address(tmp_path: Path, upstream: int) -> None:
    """One lookup per request: a name that answers differently the second time (DNS
    rebinding) is connected to at its first, checked answer."""
    lookups: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"] if len(lookups) == 1 else ["127.0.0.3"]  # nothing listens there

    settings = EgressSettings(allow_private=("127.0.0.1",))
    proxy = await started(
        tmp_path, "p.sock", HostPolicy(["rebind.test"]), settings=settings, resolver=rebinding
    )
    try:
        request = f"GET http://rebind.test:{upstream}/x HTTP/1.1\r\n\r\n".encode()
        reply = await exchange(tmp_path / "p.sock", request)
        assert reply.startswith(b"HTTP/1.1 200 OK") and reply.endswith(b"GET /x HTTP/1.1")
        assert lookups == ["rebind.test"]
        reply = await exchange(tmp_path / "p.sock", request)  # the second answer is checked too
        assert reply.startswith(b"HTTP/1.1 403") and b"refused: 127.0.0.3 is" in reply
        assert lookups == ["rebind.test", "rebind.test"]
    finally:
        await proxy.aclose()


def own_non_loopback_addresses() -> list[str]:
    out = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=False)
    addresses = [
        a["local"]
        for link in (json.loads(out.stdout) if out.returncode == 0 else [])
        for a in link.get("addr_info", [])
        if a.get("scope") == "global"
    ]
    return [a for a in addresses if not ipaddress.ip_address(a).is_loopback]


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from a server bound to every address"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


async def test_unrestricted_refuses_the_hosts_own_addresses(tmp_path: Path) -> None:
    addresses = own_non_loopback_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address")
    server = http.server.ThreadingHTTPServer(("", 0), _Hello)  # bound to 0.0.0.0: reachable
    port = server.server_address[1]
    proxy = await started(tmp_path, "p.sock", HostPolicy([], public=True))
    try:
        for address in addresses:
            host = f"[{address}]" if ":" in address else address
            request = f"GET http://{host}:{port}/ HTTP/1.1\r\n\r\n".encode()
            reply = await exchange(tmp_path / "p.sock", request)
            assert reply.startswith(b"HTTP/1.1 403"), (address, reply)
            assert b"is one of this host's own addresses" in reply, reply
    finally:
        await proxy.aclose()
        server.server_close()


_OWN_PUBLIC_ADDRESS = textwrap.dedent(
    """
    import asyncio, http.server, socket, subprocess, sys, tempfile, threading
    from pathlib import Path
    from corral.hands._egress import EgressProxy, HostPolicy
    sys.path.insert(0, sys.argv[1])
    from tests.hands.test_egress_proxy import _Hello, exchange

    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["ip", "addr", "add", "8.8.8.8/32", "dev", "lo"], check=True)
    server = http.server.ThreadingHTTPServer(("", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    with socket.create_connection(("8.8.8.8", port)):  # the address really is this host's
        pass

    async def main():
        path = Path(tempfile.mkdtemp()) / "p.sock"
        proxy = EgressProxy(HostPolicy([], public=True))
        await proxy.start(path)
        request = f"GET http://8.8.8.8:{port}/ HTTP/1.1\\r\\n\\r\\n".encode()
        print((await exchange(path, request)).decode())
        await proxy.aclose()

    asyncio.run(main())
    """
)


def test_unrestricted_refuses_the_hosts_own_public_address(tmp_path: Path) -> None:
    """In a private network namespace (nothing leaves it) whose loopback also carries the
    public 8.8.8.8, a server bound to 0.0.0.0 is not reachable through the proxy."""
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {probe.stderr.decode().strip()}")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        ["unshare", "--net", "--", sys.executable, "-c", _OWN_PUBLIC_ADDRESS, str(root)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("HTTP/1.1 403"), out.stdout
    assert "8.8.8.8 is one of this host's own addresses" in out.stdout
    assert "hello from a server" not in out.stdout


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


_FLOOD = textwrap.dedent(
    """
    import json, os, resource, socket, sys
    path, count = sys.argv[1], int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    dir_fd = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    held = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(f"/proc/self/fd/{dir_fd}/{os.path.basename(path)}")
        held.append(s)
    print("connected", flush=True)
    sys.stdin.readline()
    answers = {}
    for s in held:
        s.setblocking(False)
        try:
            status = s.recv(4096).split(b" ")[1].decode()
        except (BlockingIOError, IndexError):
            status = "none"
        answers[status] = answers.get(status, 0) + 1
    print(json.dumps(answers), flush=True)
    """
)


async def test_idle_connections_cannot_exhaust_the_servers_descriptors(
    tmp_path: Path, upstream: int
) -> None:
    """Thousands of idle connections to one sandbox's socket: the server's descriptors stay
    bounded, the extra connections get a clear 429, and another sandbox's proxy still works."""
    settings = EgressSettings(allow_private=("127.0.0.1",))
    policy = HostPolicy(["127.0.0.1"])
    flooded = await started(tmp_path, "flooded.sock", policy, settings=settings)
    other = await started(tmp_path, "other.sock", policy, settings=settings)
    before = open_fds()
    flood = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _FLOOD, str(tmp_path / "flooded.sock"), "3000",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert flood.stdin is not None and flood.stdout is not None
    try:
        assert await asyncio.wait_for(flood.stdout.readline(), 120) == b"connected\n"
        held = open_fds() - before
        assert held <= 2 * settings.max_connections + 4, f"{held} descriptors for one sandbox"
        request = f"GET http://127.0.0.1:{upstream}/ok HTTP/1.1\r\n\r\n".encode()
        assert (await exchange(tmp_path / "other.sock", request)).endswith(b"GET /ok HTTP/1.1")
        flood.stdin.write(b"go\n")
        answers = json.loads(await flood.stdout.readline())
        assert answers == {"429": 3000 - settings.max_connections, "none": 64}, answers
    finally:
        if flood.returncode is None:
            flood.kill()
        await flood.wait()
    reply = await exchange(tmp_path / "flooded.sock", request)  # slots free again
    assert reply.endswith(b"GET /ok HTTP/1.1"), reply
    await flooded.aclose()
    await other.aclose()


async def test_the_429_body_is_clear(tmp_path: Path) -> None:
    proxy = await started(
        tmp_path, "p.sock", HostPolicy([]), settings=EgressSettings(max_connections=1)
    )
    try:
        _, held = await connect(tmp_path / "p.sock")
        reply = await exchange(tmp_path / "p.sock", b"GET http://x/ HTTP/1.1\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 429 Too Many Requests")
        assert b"too many concurrent connections from this sandbox (limit 1)" in reply
        held.close()
    finally:
        await proxy.aclose()


async def _big(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    size = int(head.split(b" ")[1].strip(b"/"))
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + b"x" * size)
    await writer.drain()
    writer.close()


async def test_the_byte_budget_ends_egress_for_the_sandbox(tmp_path: Path) -> None:
    server = await asyncio.start_server(_big, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = EgressSettings(allow_private=("127.0.0.1",), bytes_budget=100_000)
    proxy = await started(tmp_path, "p.sock", HostPolicy(["127.0.0.1"]), settings=settings)
    try:
        small = await exchange(
            tmp_path / "p.sock", f"GET http://127.0.0.1:{port}/10 HTTP/1.1\r\n\r\n".encode()
        )
        assert small.endswith(b"\r\n\r\n" + b"x" * 10)
        big = await exchange(
            tmp_path / "p.sock", f"GET http://127.0.0.1:{port}/500000 HTTP/1.1\r\n\r\n".encode()
        )
        assert len(big) < 100_000, "relaying stops when the budget runs out"
        assert proxy.bytes_used > 100_000
        after = await exchange(
            tmp_path / "p.sock", f"GET http://127.0.0.1:{port}/1 HTTP/1.1\r\n\r\n".encode()
        )
        assert after.startswith(b"HTTP/1.1 403 Forbidden")
        assert b"this sandbox's egress budget of 100000 bytes is used up" in after
    finally:
        await proxy.aclose()
        server.close()


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()  # says nothing, until the other side goes away
    writer.close()


async def test_idle_relayed_connections_are_closed(tmp_path: Path) -> None:
    server = await asyncio.start_server(_silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = EgressSettings(allow_private=("127.0.0.1",), idle_seconds=0.5)
    proxy = await started(tmp_path, "p.sock", HostPolicy(["127.0.0.1"]), settings=settings)
    try:
        reader, writer = await connect(tmp_path / "p.sock")
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"hello?")  # then the tunnel goes quiet both ways
        assert await asyncio.wait_for(reader.read(), 30) == b""  # 30 s: only a hang guard
        writer.close()
    finally:
        await proxy.aclose()
        server.close()


def test_the_server_raises_its_open_file_limit_to_the_hard_limit() -> None:
    """Bounded per sandbox is bounded in total only with room for every sandbox's share."""
    script = textwrap.dedent(
        """
        import resource
        from corral.cli import raise_fd_limit
        from corral.config import Settings
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        raised = raise_fd_limit(Settings())
        print(raised == hard == resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert out.stdout.strip() == "True", out.stderr
