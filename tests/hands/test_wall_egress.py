"""Red-team probes of the egress wall from inside real sandboxes: descriptor exhaustion through
the proxy socket, names that resolve to the host, and the host's own addresses."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from corral.hands import _bwrap
from corral.hands.base import Networking
from corral.hands.local import LocalHands, LocalSandbox
from corral.netpolicy import EgressSettings
from tests.hands.conftest import loopback_http, make_recipe, needs_bwrap
from tests.hands.test_egress_proxy import own_non_loopback_addresses
from tests.uids import WORKER_UIDS

pytestmark = [pytest.mark.bwrap, needs_bwrap, pytest.mark.anyio]


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def host_server() -> Iterator[int]:
    with loopback_http(_Hello) as port:
        yield port


@pytest.fixture
async def hands(tmp_path: Path) -> AsyncIterator[LocalHands]:
    """Default egress settings: the operator opened nothing private."""
    provider = LocalHands(tmp_path / "hands-state", uid_range=WORKER_UIDS)
    yield provider
    await provider.aclose()


async def bash(sandbox: LocalSandbox, command: str, timeout_ms: int = 20_000) -> str:
    out = await sandbox.execute("bash", {"command": command, "timeout_ms": timeout_ms})
    return str(out.content[0]["text"])


_FLOOD = textwrap.dedent(
    f"""
    import json, os, resource, socket, time
    resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    held = []
    for _ in range(3000):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("{_bwrap.PROXY_SOCKET}")
        held.append(s)
    open("ready", "w").close()
    while not os.path.exists("go"):
        time.sleep(0.05)
    answers = {{}}
    for s in held:
        s.setblocking(False)
        try:
            status = s.recv(4096).split(b" ")[1].decode()
        except (BlockingIOError, IndexError):
            status = "none"
        answers[status] = answers.get(status, 0) + 1
    print(json.dumps(answers))
    """
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_a_sandbox_cannot_exhaust_the_servers_descriptors(
    tmp_path: Path, host_server: int
) -> None:
    """A sandbox opening thousands of connections straight to its proxy socket holds a
    bounded number of the server's descriptors; another sandbox's egress keeps working."""
    net = Networking(type="limited", allowed_hosts=("127.0.0.1",))
    egress = EgressSettings(allow_private=("127.0.0.1",))
    hands = LocalHands(tmp_path / "hands-state", uid_range=WORKER_UIDS, egress=egress)
    try:
        attacker = await hands.provision(make_recipe(tmp_path, "attacker", networking=net))
        bystander = await hands.provision(make_recipe(tmp_path, "bystander", networking=net))
        (tmp_path / "attacker" / "workspace" / "flood.py").write_text(_FLOOD)
        before = open_fds()
        flood = asyncio.ensure_future(bash(attacker, "python3 flood.py", timeout_ms=120_000))
        ready = tmp_path / "attacker" / "workspace" / "ready"
        while not ready.exists():
            assert not flood.done(), flood.result()
            await asyncio.sleep(0.05)
        held = open_fds() - before
        assert held <= 2 * egress.max_connections + 8, f"one sandbox holds {held} server fds"
        text = await bash(bystander, f"curl -sS -m 10 http://127.0.0.1:{host_server}/x")
        assert text == "hello from the host"
        (tmp_path / "attacker" / "workspace" / "go").touch()
        answers = json.loads(await flood)
        assert answers == {"429": 3000 - egress.max_connections, "none": egress.max_connections}
        text = await bash(attacker, f"curl -sS -m 10 http://127.0.0.1:{host_server}/x")
        assert text == "hello from the host", "the flood's slots are free once it ends"
    finally:
        await hands.aclose()


async def test_limited_refuses_an_allowed_name_that_resolves_to_the_host(
    hands: LocalHands, tmp_path: Path, host_server: int
) -> None:
    net = Networking(type="limited", allowed_hosts=("localhost",))
    sandbox = await hands.provision(make_recipe(tmp_path, networking=net))
    text = await bash(
        sandbox, f"curl -sS -m 10 -w ' %{{http_code}}' http://localhost:{host_server}/"
    )
    assert text.endswith(" 403") and "hello from the host" not in text, text
    assert "127.0.0.1 is one of this host's own addresses" in text
    text = await bash(sandbox, f"curl -sS -m 10 -p http://localhost:{host_server}/")
    assert "403" in text and "hello from the host" not in text, text


async def test_allow_private_lets_a_listed_name_reach_a_local_server(
    tmp_path: Path, host_server: int
) -> None:
    hands = LocalHands(
        tmp_path / "hands-state",
        egress=EgressSettings(allow_private=("localhost",)),
        uid_range=WORKER_UIDS,
    )
    try:
        net = Networking(type="limited", allowed_hosts=("localhost",))
        sandbox = await hands.provision(make_recipe(tmp_path, networking=net))
        for flags in ("", "-p"):  # plain GET, and a CONNECT tunnel
            text = await bash(sandbox, f"curl -sS -m 10 {flags} http://localhost:{host_server}/")
            assert text == "hello from the host", (flags, text)
        text = await bash(sandbox, f"curl -sS -m 10 http://127.0.0.1:{host_server}/")
        assert "not in allowed_hosts" in text, "the operator's rule opens only what is listed"
    finally:
        await hands.aclose()


async def test_unrestricted_cannot_reach_the_hosts_own_addresses(
    hands: LocalHands, tmp_path: Path
) -> None:
    addresses = own_non_loopback_addresses()
    if not addresses:
        pytest.skip("this machine has no non-loopback address")
    server = http.server.ThreadingHTTPServer(("", 0), _Hello)  # every address of the host
    port = server.server_address[1]
    try:
        sandbox = await hands.provision(
            make_recipe(tmp_path, networking=Networking(type="unrestricted"))
        )
        for address in addresses:
            host = f"[{address}]" if ":" in address else address
            text = await bash(sandbox, f"curl -sS -m 10 http://{host}:{port}/")
            assert "is one of this host's own addresses" in text, (address, text)
            assert "hello from the host" not in text
    finally:
        server.server_close()
