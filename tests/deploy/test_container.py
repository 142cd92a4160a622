"""The image alone: `corral serve` in a container (SQLite in the data volume) runs a bash
call in a bubblewrap sandbox, as its own uid from `sandbox_uid_range`, with only the
privileges docs/deploy.md lists (CAP_SYS_ADMIN and an unmasked /proc)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import anthropic
import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.deploy.conftest import Images
from tests.deploy.podman import Podman
from tests.deploy.support import TOOLSET, wait_healthy
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import free_port

API_KEY = "crl_deploy_" + secrets.token_hex(8)
# What docs/deploy.md says a container running sandboxes needs, and nothing more.
SANDBOX_PRIVILEGES = ("--cap-add", "SYS_ADMIN", "--security-opt", "unmask=/proc/*")
DEFAULT_UID_RANGE = (1_879_048_192, 1_879_113_727)
BASH = "id -u; echo written > /workspace/hello.txt; cat /workspace/hello.txt"


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    turns = [Turn([ToolUse("bash", {"command": BASH})]), Turn([Text("done")])]
    with FakeModelServer(turns) as fake:
        yield fake


def serve(
    podman: Podman, images: Images, fake: FakeModelServer, *privileges: str
) -> tuple[str, int]:
    """A started `corral serve` container on the host's loopback; (name, port)."""
    name, port = f"corral-solo-{secrets.token_hex(4)}", free_port()
    podman.run(
        "run", "-d", "--name", name, "--network", "host", *privileges,
        "-e", f"CORRAL_API_KEYS={API_KEY}", "-e", "ANTHROPIC_API_KEY=sk-test",
        "-e", f"ANTHROPIC_BASE_URL={fake.url}", "-v", f"{name}-data:/var/lib/corral",
        images.corral, "serve", "--host", "127.0.0.1", "--port", str(port),
    )  # fmt: skip

    def exited() -> str | None:
        state = podman.run("inspect", "-f", "{{.State.Status}}", name).stdout.strip()
        if state == "running":
            return None
        return f"container {state}: {podman.run('logs', name, check=False).stderr[-3000:]}"

    wait_healthy(f"http://127.0.0.1:{port}", alive=exited)
    return name, port


@pytest.mark.timeout(1500)
def test_bash_call_runs_sandboxed_as_its_own_uid(
    podman: Podman, images: Images, fake: FakeModelServer
) -> None:
    with podman.phase("single container: start"):
        name, port = serve(podman, images, fake, *SANDBOX_PRIVILEGES)
    try:
        with podman.phase("single container: bash turn"):
            client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=API_KEY)
            session_id, _ = make_session(client, tools=[TOOLSET])
            say(client, session_id, "run it")
            wait_idle(client, session_id, stop="end_turn", timeout=90)
        [result] = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
        output = result.content[0].text
        assert not result.is_error, output
        # uid 1000 inside the sandbox's own user namespace; the file really written.
        assert output.splitlines()[:2] == ["1000", "written"], output
        workspace = f"/var/lib/corral/sessions/{session_id}/workspace"
        owner = podman.run("exec", name, "stat", "-c", "%u", workspace).stdout.strip()
        assert DEFAULT_UID_RANGE[0] <= int(owner) <= DEFAULT_UID_RANGE[1], owner
    finally:
        podman.run("rm", "-f", name, check=False)
        podman.run("volume", "rm", "-f", f"{name}-data", check=False)


@pytest.mark.timeout(600)
def test_without_the_privileges_the_tool_call_fails_and_says_why(
    podman: Podman, images: Images, fake: FakeModelServer
) -> None:
    """The documented privileges are needed: without them the sandbox cannot start."""
    name, port = serve(podman, images, fake)
    try:
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=API_KEY)
        session_id, _ = make_session(client, tools=[TOOLSET])
        say(client, session_id, "run it")
        wait_idle(client, session_id, stop="end_turn", timeout=90)
        [result] = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
        assert result.is_error
        assert "provision_failed" in result.content[0].text
    finally:
        podman.run("rm", "-f", name, check=False)
        podman.run("volume", "rm", "-f", f"{name}-data", check=False)
