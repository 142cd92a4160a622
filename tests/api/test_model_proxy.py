"""A turn whose model call leaves through a corporate network: the model (HTTPS, with a
certificate from a private CA the server trusts only through `SSL_CERT_FILE`) is reached
through a CONNECT tunnel of the proxy `HTTPS_PROXY` names, or straight when `NO_PROXY` names
its host. SDK -> Corral server subprocess -> proxy -> model, all on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.fakes.connect_proxy import ConnectProxy
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.fakes.tls_host import make_certs
from tests.server import ServerProcess


@pytest.fixture(scope="module")
def tls_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FakeModelServer, Path]]:
    """The fake model over HTTPS, and the private CA that signed its certificate."""
    ca, leaf, _ = make_certs(tmp_path_factory.mktemp("ca"))
    turns = ScriptedTurns([Turn([Text("through the network")])], repeat_last=True)
    with FakeModelServer(turns, tls_cert=leaf) as fake:
        yield fake, ca


def turn_text(server: ServerProcess) -> str:
    """One text-only turn through the SDK; the agent's answer."""
    client = server.client()
    session_id, _ = make_session(client, tools=[])
    say(client, session_id, "hello")
    wait_idle(client, session_id, stop="end_turn", timeout=60)
    return "".join(
        block.text
        for event in events(client, session_id)
        if event.type == "agent.message"
        for block in event.content
    )


def proxied_env(proxy: ConnectProxy, ca: Path, no_proxy: str) -> dict[str, str]:
    # Lower-case forms win; emptied so a developer's own proxy settings cannot interfere.
    return {
        "HTTPS_PROXY": proxy.url,
        "https_proxy": "",
        "ALL_PROXY": "",
        "all_proxy": "",
        "NO_PROXY": no_proxy,
        "no_proxy": "",
        "SSL_CERT_FILE": str(ca),
    }


def test_the_model_call_goes_through_the_proxy_tunnel_and_trusts_ssl_cert_file(
    tmp_path: Path, tls_model: tuple[FakeModelServer, Path]
) -> None:
    fake, ca = tls_model
    with ConnectProxy() as proxy:
        env = proxied_env(proxy, ca, no_proxy="")
        server = ServerProcess(tmp_path / "data", model_url=fake.url, env=env).start()
        try:
            assert turn_text(server) == "through the network"
        finally:
            server.stop()
    assert proxy.tunnels == [fake.url.removeprefix("https://")]
    assert proxy.refused == []


def test_no_proxy_sends_the_model_call_straight_to_the_host(
    tmp_path: Path, tls_model: tuple[FakeModelServer, Path]
) -> None:
    fake, ca = tls_model
    with ConnectProxy() as proxy:
        env = proxied_env(proxy, ca, no_proxy="localhost,127.0.0.1")
        server = ServerProcess(tmp_path / "data", model_url=fake.url, env=env).start()
        try:
            assert turn_text(server) == "through the network"
        finally:
            server.stop()
    assert proxy.tunnels == []
    assert len(fake.requests) >= 1
