"""Sandbox networking: none, limited (through the host's egress proxy), unrestricted."""

from __future__ import annotations

import http.server
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.hands.base import Networking
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import loopback_http, make_recipe, needs_bwrap

pytestmark = [pytest.mark.bwrap, needs_bwrap, pytest.mark.anyio]


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from the host {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def host_server() -> Iterator[int]:
    """An HTTP server on the host's loopback; yields its port."""
    with loopback_http(_Hello) as port:
        yield port


async def bash(sandbox: LocalSandbox, command: str) -> tuple[str, bool]:
    out = await sandbox.execute("bash", {"command": command, "timeout_ms": 20_000})
    return out.content[0]["text"], out.is_error


def curl(port: int, *flags: str) -> str:
    return f"curl -sS -m 10 {' '.join(flags)} http://127.0.0.1:{port}/x"


async def test_limited_reaches_allowed_hosts_through_the_proxy(
    local_hands: LocalHands, tmp_path: Path, host_server: int
) -> None:
    net = Networking(type="limited", allowed_hosts=("127.0.0.1",))
    sandbox = await local_hands.provision(make_recipe(tmp_path, networking=net))
    assert await bash(sandbox, curl(host_server)) == ("hello from the host /x", False)
    urllib = f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{host_server}/y').read().decode())"
    assert await bash(sandbox, f'python3 -c "{urllib}"') == ("hello from the host /y", False)
    text, _ = await bash(sandbox, curl(host_server, "-p"))  # CONNECT tunnel
    assert text == "hello from the host /x"
    text, err = await bash(sandbox, curl(host_server, "--noproxy '*'"))
    assert err and "Couldn't connect" in text, "direct connections must fail"


async def test_limited_refuses_other_hosts(
    local_hands: LocalHands, tmp_path: Path, host_server: int
) -> None:
    net = Networking(type="limited", allowed_hosts=("example.invalid", "*.example.org"))
    sandbox = await local_hands.provision(make_recipe(tmp_path, networking=net))
    text, _ = await bash(sandbox, curl(host_server, "-w ' %{http_code}'"))
    assert "not in allowed_hosts" in text and text.endswith(" 403")
    text, err = await bash(sandbox, curl(host_server, "-p"))
    assert err and "403" in text
    text, err = await bash(sandbox, curl(host_server, "--noproxy '*'"))
    assert err


async def test_none_has_no_network(
    local_hands: LocalHands, tmp_path: Path, host_server: int
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path, networking=Networking(type="none")))
    text, err = await bash(sandbox, curl(host_server))
    assert err and "Couldn't connect" in text
    text, _ = await bash(sandbox, "env | grep -ci proxy; ls /run")
    assert text.startswith("0"), "no proxy settings without limited networking"


async def test_unrestricted_cannot_reach_the_hosts_internal_services(
    local_hands: LocalHands, tmp_path: Path, host_server: int
) -> None:
    """`unrestricted` means the public internet, never the host's loopback (database, API)."""
    net = Networking(type="unrestricted")
    sandbox = await local_hands.provision(make_recipe(tmp_path, networking=net))
    text, _ = await bash(sandbox, curl(host_server))
    assert "sandboxes may only reach public addresses" in text, text
    assert "hello from the host" not in text
    direct, err = await bash(sandbox, f"curl -sS --noproxy '*' http://127.0.0.1:{host_server}/x")
    assert err, f"a direct connection must fail, got {direct!r}"
    text, _ = await bash(sandbox, "env | grep -c '^https_proxy='")
    assert text.strip() == "1"


def test_only_public_addresses_count_as_public() -> None:
    from corral.hands._egress import is_public

    for internal in (
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "fc00::1",
        "0.0.0.0",
        "::ffff:127.0.0.1",
        "100.64.0.1",
    ):
        assert not is_public(internal), internal
    for public in ("1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"):
        assert is_public(public), public
