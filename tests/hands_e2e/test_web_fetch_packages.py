"""web_fetch and environment packages end to end: SDK -> server -> bubblewrap -> egress proxy."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.hands.conftest import needs_registry
from tests.registries import private_registry_hosts
from tests.server import ServerProcess, backend_env

TOOLSET = {"type": "agent_toolset_20260401"}
PAGE = b"<html><head><title>Status</title><script>hidden()</script></head><body><h1>All good</h1>"
PAGE += b"<p>Deploy <b>42</b> is healthy.</p></body></html>"


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[ServerProcess]:
    """The shared server, with the operator opening the loopback (where the test page is) to
    environments that list it: private addresses are refused otherwise."""
    with backend_env(backend) as env:
        allowed = ",".join(("127.0.0.1", *private_registry_hosts()))
        env = {**env, "CORRAL_EGRESS_ALLOW_PRIVATE": allowed}
        data_dir = tmp_path_factory.mktemp("corral")
        proc = ServerProcess(data_dir, model_url=fake_model.url, env=env).start()
        yield proc
        proc.stop()


@pytest.fixture
def page_url() -> Iterator[str]:
    """A page served on the host's loopback."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/status"
    server.shutdown()
    server.server_close()


def results(client: anthropic.Anthropic, session_id: str) -> list[tuple[str, bool]]:
    return [
        (e.content[0].text, bool(e.is_error))
        for e in events(client, session_id)
        if e.type == "agent.tool_result"
    ]


def test_web_fetch_obeys_the_environments_networking(
    server: ServerProcess, fake_model: FakeModelServer, page_url: str
) -> None:
    client = server.client()
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="web", tools=[TOOLSET])  # type: ignore[list-item]
    config: Any = {
        "type": "cloud",
        "networking": {"type": "limited", "allowed_hosts": ["127.0.0.1"]},
    }
    env = client.beta.environments.create(name="w", config=config)
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    fake_model.reset(
        [
            Turn([ToolUse("web_fetch", {"url": page_url})]),
            Turn([ToolUse("web_fetch", {"url": "http://example.com/"})]),
            Turn([Text("fetched")]),
        ]
    )
    say(client, session.id, "check the status page")
    wait_idle(client, session.id, stop="end_turn")
    (page, page_error), (refused, refused_error) = results(client, session.id)
    assert not page_error and "Title: Status" in page, page
    assert "# All good" in page and "Deploy 42 is healthy." in page and "hidden" not in page
    assert refused_error and "host 'example.com' is not in allowed_hosts" in refused
    tools = [t["name"] for t in fake_model.requests[0]["tools"]]
    assert "web_fetch" in tools and "web_search" not in tools


@pytest.mark.parametrize("kind", ["apt", "cargo", "gem", "go"])
def test_unsupported_package_managers_are_a_400(server: ServerProcess, kind: str) -> None:
    client = server.client()
    config: Any = {"type": "cloud", "packages": {kind: ["x"]}}
    with pytest.raises(anthropic.BadRequestError, match=f"{kind} packages are not supported"):
        client.beta.environments.create(name="p", config=config)
    env = client.beta.environments.create(name="p", config={"type": "cloud"})
    config["packages"]["pip"] = ["six"]
    with pytest.raises(anthropic.BadRequestError, match=f"config.packages.{kind}"):
        client.beta.environments.update(env.id, config=config)


@needs_registry("pypi.org")
def test_packages_are_installed_once_per_environment(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="pkg", tools=[TOOLSET])  # type: ignore[list-item]
    env = client.beta.environments.create(
        name="p", config={"type": "cloud", "packages": {"pip": ["six==1.16.0"]}}
    )
    check = 'python3 -c "import six; print(six.__version__)"'
    for _ in range(2):
        session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
        fake_model.reset([Turn([ToolUse("bash", {"command": check})]), Turn([Text("ok")])])
        say(client, session.id, "which six?")
        wait_idle(client, session.id, stop="end_turn", timeout=300)
        assert results(client, session.id) == [("1.16.0", False)]
    logs = list((server.data_dir / "layers").glob("*.log"))
    assert len(logs) == 1 and logs[0].read_text().count("== build of layer ") == 1
