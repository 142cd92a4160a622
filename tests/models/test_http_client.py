"""The model providers' HTTP client against a raw socket server that answers each request
with scripted bytes: body framings, keep-alive, a stale kept-alive connection, cuts, stalls,
malformed answers, TLS, and the proxy and trust variables. The providers' own tests run it
against the wire-level fake model; tests/models/test_proxy_e2e.py runs a whole turn through
a proxy.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corral.models.http_client import ModelHttpClient, Stalled, TransportError
from tests.fakes.connect_proxy import ConnectProxy
from tests.tls import self_signed

pytestmark = pytest.mark.anyio

Reply = Callable[[bytes], bytes | None]
"""The request's bytes (head and body) -> the raw answer; None: close without answering."""
Paced = list[tuple[float, bytes]]
"""An answer sent in pieces, each after a pause (seconds)."""


@dataclass
class RawServer:
    """Answers the n-th request on any connection with `replies[n]`; then keeps the connection
    open unless the reply said `connection: close` (or was None)."""

    replies: list[Reply | bytes | Paced | None]
    tls: ssl.SSLContext | None = None
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    close_after_each: bool = False
    server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                reply = self.replies.pop(0)
                if isinstance(reply, list):
                    for pause, piece in reply:
                        await asyncio.sleep(pause)
                        writer.write(piece)
                        await writer.drain()
                    continue
                answer = reply(request) if callable(reply) else reply
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if b"connection: close" in answer.lower() or self.close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


Serve = Callable[..., Awaitable[tuple[RawServer, str]]]
"""served(*replies, tls=None) -> (the server, its URL)"""


@pytest.fixture
async def served() -> AsyncIterator[Serve]:
    servers: list[RawServer] = []

    async def start(
        *replies: Reply | bytes | Paced | None, tls: ssl.SSLContext | None = None
    ) -> tuple[RawServer, str]:
        server = RawServer(list(replies), tls=tls)
        servers.append(server)
        return server, await server.start()

    yield start
    for server in servers:
        await server.stop()


def ok(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    for part in parts:
        out += f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n"
    return out + b"0\r\n" + trailer + b"\r\n"


def client(
    url: str,
    timeout: float = 5.0,
    tls: ssl.SSLContext | None = None,
    env: dict[str, str] | None = None,
) -> ModelHttpClient:
    return ModelHttpClient(
        url, {"x-api-key": "k"}, timeout=timeout, connect_timeout=5.0, tls=tls, env=env or {}
    )


async def body_of(http: ModelHttpClient, path: str = "/v1/x", body: bytes = b"{}") -> bytes:
    async with http.post(path, body) as response:
        return b"".join([chunk async for chunk in response.chunks()])


async def test_request_carries_path_prefix_host_fixed_headers_and_body(served: Serve) -> None:
    server, url = await served(ok(b"hi"))
    http = client(url + "/api/")
    assert await body_of(http, "/v1/messages", b'{"a":1}') == b"hi"
    await http.aclose()
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /api/v1/messages HTTP/1.1"
    port = url.rsplit(":", 1)[1]
    assert {"host: 127.0.0.1:" + port, "x-api-key: k", "content-length: 7"} <= set(lines)
    assert sum(line.startswith("host:") for line in lines) == 1
    assert body == b'{"a":1}'


async def test_chunked_body_with_extensions_and_trailers_then_the_connection_is_reused(
    served: Serve,
) -> None:
    server, url = await served(
        chunked(b"data: 1\n", b"\ndata: 2\r\n\r\n", trailer=b"x-trailer: t\r\n"), ok(b"again")
    )
    http = client(url)
    async with http.post("/s", b"{}") as response:
        assert response.status == 200
        assert [line async for line in response.lines()] == ["data: 1", "", "data: 2", ""]
    assert await body_of(http) == b"again"
    await http.aclose()
    assert server.connections == 1


async def test_a_body_ended_by_close_is_read_whole_and_the_connection_not_kept(
    served: Serve,
) -> None:
    server, url = await served(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", ok(b"next"))
    server.close_after_each = True
    http = client(url)
    assert await body_of(http) == b"until the end"
    assert await body_of(http) == b"next"
    await http.aclose()
    assert server.connections == 2


async def test_connection_close_and_http_1_0_answers_are_not_reused(served: Serve) -> None:
    server, url = await served(
        ok(b"a", "connection: close"), b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nb", ok(b"c")
    )
    server.close_after_each = False
    http = client(url)
    assert [await body_of(http) for _ in range(3)] == [b"a", b"b", b"c"]
    await http.aclose()
    assert server.connections == 3


async def test_an_interim_100_answer_is_skipped(served: Serve) -> None:
    _, url = await served(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"final"))
    http = client(url)
    async with http.post("/s", b"{}") as response:
        assert response.status == 200
        assert await response.read(100) == b"final"
    await http.aclose()


async def test_an_error_status_is_a_response_not_an_exception(served: Serve) -> None:
    _, url = await served(
        b"HTTP/1.1 529 Overloaded\r\ncontent-length: 9\r\nX-Extra: 1\r\n\r\noverload!"
    )
    http = client(url)
    async with http.post("/s", b"{}") as response:
        assert (response.status, response.reason) == (529, "Overloaded")
        assert response.headers["x-extra"] == "1"
        assert await response.read(4) == b"over"
    await http.aclose()


async def test_a_kept_alive_connection_the_server_closed_is_replaced_once(served: Serve) -> None:
    # The first connection answers once and then, on the next request, closes without a
    # word (as a server whose idle timeout fired just as the request went out).
    server, url = await served(ok(b"one"), None, ok(b"two"))
    http = client(url)
    assert await body_of(http) == b"one"
    assert await body_of(http) == b"two"
    await http.aclose()
    assert server.connections == 2
    assert len(server.requests) == 3  # the lost request was sent again, once


async def test_a_new_connection_closed_without_an_answer_fails(served: Serve) -> None:
    server, url = await served(None)
    http = client(url)
    with pytest.raises(TransportError, match="without answering"):
        await body_of(http)
    await http.aclose()
    assert len(server.requests) == 1  # not sent twice


async def test_a_stall_longer_than_the_timeout_fails(served: Serve) -> None:
    def stalled_body(_: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"

    _, url = await served(stalled_body)
    http = client(url, timeout=0.3)
    with pytest.raises(Stalled, match="nothing sent for 0.3 s"):
        await body_of(http)
    await http.aclose()


async def test_a_server_that_never_answers_fails_after_the_timeout(served: Serve) -> None:
    _, url = await served([(5.0, ok(b"too late"))])
    http = client(url, timeout=0.3)
    started = asyncio.get_running_loop().time()
    with pytest.raises(Stalled, match="nothing sent for 0.3 s"):
        await body_of(http)
    assert asyncio.get_running_loop().time() - started < 3.0
    await http.aclose()


async def test_a_slow_steady_stream_longer_than_the_timeout_completes(served: Serve) -> None:
    pieces = [(0.1, b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")]
    pieces += [(0.1, b"1\r\nx\r\n") for _ in range(12)]  # 1.3 s in all, 0.1 s apart
    pieces.append((0.1, b"0\r\n\r\n"))
    _, url = await served(pieces)
    http = client(url, timeout=0.4)
    assert await body_of(http) == b"x" * 12
    await http.aclose()


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"SMTP ready\r\n\r\n", "RemoteProtocolError"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "RemoteProtocolError"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -3\r\n\r\n", "RemoteProtocolError"),
        (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", "RemoteProtocolError"),
    ],
)
async def test_malformed_answers_are_transport_errors(
    served: Serve, answer: bytes, match: str
) -> None:
    _, url = await served(answer)
    http = client(url)
    with pytest.raises(TransportError, match=match):
        await body_of(http)
    await http.aclose()


async def test_a_body_cut_short_is_a_transport_error(served: Serve) -> None:
    server, url = await served(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort")
    server.close_after_each = True
    http = client(url)
    with pytest.raises(TransportError, match="RemoteProtocolError"):
        await body_of(http)
    await http.aclose()


async def test_nothing_listening_is_a_transport_error() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    http = client(f"http://127.0.0.1:{port}")
    with pytest.raises(TransportError, match="cannot connect"):
        await body_of(http)


def test_bad_configuration_is_refused_when_the_client_is_made() -> None:
    for url in ("ftp://host", "http://", "https://host?x=1", "http://u:p@host", "http://h:99999"):
        with pytest.raises(ValueError):
            client(url)
    with pytest.raises(ValueError, match="line break"):
        ModelHttpClient(
            "http://h", {"x-api-key": "a\r\nx: y"}, timeout=1, connect_timeout=1, env={}
        )
    for bad in ("socks5://127.0.0.1:1080", "http://:3128", "http://p:port"):
        with pytest.raises(ValueError, match="HTTPS_PROXY"):
            client("https://api.example.com", env={"HTTPS_PROXY": bad})


async def test_tls_verifies_the_server_and_streams(served: Serve, tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    _, url = await served(chunked(b"secure"), ok(b"x"), tls=server_tls)
    trusting = ssl.create_default_context(cafile=str(cert))
    http = client(url, tls=trusting)
    assert await body_of(http) == b"secure"
    await http.aclose()
    # The default roots do not know this certificate: the handshake is refused.
    with pytest.raises(TransportError, match="cannot connect"):
        await body_of(client(url))


async def test_https_goes_through_the_proxy_tunnel_and_no_proxy_bypasses_it(
    served: Serve, tmp_path: Path
) -> None:
    cert, key = self_signed(tmp_path)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server, url = await served(ok(b"tunnelled"), ok(b"again"), ok(b"direct"), tls=server_tls)
    trusting = ssl.create_default_context(cafile=str(cert))
    target = url.removeprefix("https://")
    with ConnectProxy() as proxy:
        http = client(url, tls=trusting, env={"https_proxy": proxy.url, "HTTP_PROXY": "x"})
        assert await body_of(http) == b"tunnelled"
        assert await body_of(http) == b"again"  # the tunnel is kept alive
        await http.aclose()
        assert proxy.tunnels == [target]
        # NO_PROXY names the host (a port-less entry covers every port): straight there.
        env = {"HTTPS_PROXY": proxy.url, "NO_PROXY": "example.com,127.0.0.1"}
        direct = client(url, tls=trusting, env=env)
        assert direct.proxy is None
        assert await body_of(direct) == b"direct"
        await direct.aclose()
        assert proxy.tunnels == [target]
    assert server.connections == 2


async def test_a_proxy_that_refuses_the_tunnel_is_a_transport_error_naming_it(
    served: Serve,
) -> None:
    with ConnectProxy() as proxy:
        # The proxy tunnels to loopback only: a CONNECT elsewhere is refused (nothing is sent).
        http = client("https://api.example.com", env={"ALL_PROXY": proxy.url})
        with pytest.raises(TransportError, match="through the proxy 127.0.0.1"):
            await body_of(http)
        await http.aclose()
        assert proxy.refused == ["CONNECT api.example.com:443 HTTP/1.1"]


async def test_http_is_forwarded_to_http_proxy_with_its_credentials(served: Serve) -> None:
    proxy, proxy_url = await served(ok(b"forwarded"))
    env = {"HTTP_PROXY": proxy_url.replace("http://", "http://us%40er:pa:ss@")}
    http = client("http://model.internal:8080/api", env=env)
    assert await body_of(http, "/v1/messages") == b"forwarded"
    await http.aclose()
    head = proxy.requests[0].split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert head[0] == "POST http://model.internal:8080/api/v1/messages HTTP/1.1"
    assert "host: model.internal:8080" in head
    assert "Proxy-Authorization: Basic dXNAZXI6cGE6c3M=" in head  # us@er:pa:ss
