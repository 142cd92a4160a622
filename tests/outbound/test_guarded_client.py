"""Server-side fetches obey the egress address rules, connection by connection."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx
import pytest

from corral.outbound import OutboundRefused, guarded_client, server_policy
from tests.tls import self_signed


class _Handler(BaseHTTPRequestHandler):
    redirect_to = ""

    def do_GET(self) -> None:
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", self.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = f"host={self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


async def _get(url: str, allow: list[str], **kwargs: object) -> str:
    async with guarded_client(server_policy(allow), timeout=5, **kwargs) as client:  # type: ignore[arg-type]
        response = await client.get(url)
        return response.text


def test_loopback_is_refused_unless_the_operator_allows_it(server: ThreadingHTTPServer) -> None:
    port = server.server_address[1]
    for url in (f"http://127.0.0.1:{port}/", f"http://localhost:{port}/"):
        with pytest.raises(OutboundRefused, match="127.0.0.1|::1"):
            anyio.run(_get, url, [])
    assert anyio.run(_get, f"http://127.0.0.1:{port}/", [f"127.0.0.1:{port}"]).startswith("host=")
    with pytest.raises(OutboundRefused):  # a rule for another port opens nothing here
        anyio.run(_get, f"http://127.0.0.1:{port}/", [f"127.0.0.1:{port + 1}"])


def test_a_redirect_is_checked_like_any_connection(server: ThreadingHTTPServer) -> None:
    port = server.server_address[1]
    _Handler.redirect_to = "http://127.0.0.2:9/secret"  # loopback, not covered by the rule
    with pytest.raises(OutboundRefused, match="127.0.0.2"):
        anyio.run(
            lambda: _get(f"http://127.0.0.1:{port}/redirect", [f"127.0.0.1:{port}"],
                         follow_redirects=True)
        )  # fmt: skip


def test_unix_sockets_are_never_used() -> None:
    async def main() -> None:
        from corral.outbound import GuardedBackend

        await GuardedBackend(server_policy([])).connect_unix_socket("/run/anything.sock")

    with pytest.raises(OutboundRefused):
        anyio.run(main)


def test_tls_keeps_the_name_while_connecting_to_the_checked_address(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    httpd.socket = server_context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        port = httpd.server_address[1]
        trust = ssl.create_default_context(cafile=str(cert))
        text = anyio.run(lambda: _get(f"https://localhost:{port}/", ["localhost"], verify=trust))
        assert text == f"host=localhost:{port}"  # SNI + Host carried the name, not 127.0.0.1
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_clients_share_the_trust_store_instead_of_loading_it_each_time() -> None:
    """Regression (found by the red-team suite): every client loaded the trust store twice
    (about 0.1 s of CPU each, on the event loop), which stalled a server connecting many
    sessions to MCP servers and git remotes at once until leases were lost."""

    def context_of(client: httpx.AsyncClient) -> ssl.SSLContext:
        pool = client._transport._pool  # type: ignore[attr-defined]  # the guarded pool
        return pool._ssl_context  # type: ignore[no-any-return]

    policy = server_policy([])
    first, second = guarded_client(policy), guarded_client(policy, timeout=5)
    assert context_of(first) is context_of(second)
    assert context_of(first).verify_mode == ssl.CERT_REQUIRED
    insecure = context_of(guarded_client(policy, verify=False))
    assert insecure is not context_of(first) and insecure.verify_mode == ssl.CERT_NONE
    assert context_of(guarded_client(policy, http2=True)) is not context_of(first)
