"""The image alone: `corral serve` in a container (SQLite in the data volume) runs a bash
call in a bubblewrap sandbox, as its own uid from `sandbox_uid_range`, with only the
privileges docs/deploy.md lists (CAP_SYS_ADMIN and an unmasked /proc); without them, or in a
user namespace that does not map the uid range, the call fails."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

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
# A user namespace as rootless podman or --userns=auto give: container uids 0-65535 only.
USERNS = ("--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536")
DEFAULT_UID_RANGE = (1_879_048_192, 1_879_113_727)
BASH = "id -u; echo written > /workspace/hello.txt; cat /workspace/hello.txt"


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    with FakeModelServer([]) as fake:
        yield fake


class Solo:
    """One `corral serve` container on the host's loopback, removed with its volume."""

    def __init__(self, podman: Podman, images: Images, fake: FakeModelServer, *args: str):
        self.podman, self.name, self.port = (
            podman,
            f"corral-solo-{secrets.token_hex(4)}",
            free_port(),
        )
        fake.reset([Turn([ToolUse("bash", {"command": BASH})]), Turn([Text("done")])])
        podman.run(
            "run", "-d", "--name", self.name, "--network", "host", *args,
            "-e", f"CORRAL_API_KEYS={API_KEY}", "-e", "ANTHROPIC_API_KEY=sk-test",
            "-e", f"ANTHROPIC_BASE_URL={fake.url}", "-v", f"{self.name}-data:/var/lib/corral",
            images.corral, "serve", "--host", "127.0.0.1", "--port", str(self.port),
        )  # fmt: skip
        wait_healthy(f"http://127.0.0.1:{self.port}", alive=self.exited)

    def exited(self) -> str | None:
        state = self.podman.run("inspect", "-f", "{{.State.Status}}", self.name).stdout.strip()
        if state == "running":
            return None
        return (
            f"container {state}: {self.podman.run('logs', self.name, check=False).stderr[-3000:]}"
        )

    def bash_turn(self) -> tuple[str, Any]:
        """(session id, the bash call's result event) of one turn."""
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{self.port}", api_key=API_KEY)
        session_id, _ = make_session(client, tools=[TOOLSET])
        say(client, session_id, "run it")
        wait_idle(client, session_id, stop="end_turn", timeout=90)
        [result] = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
        return session_id, result

    def workspace_owner(self, session_id: str) -> int:
        """The uid owning the session's workspace, as the container sees it."""
        workspace = f"/var/lib/corral/sessions/{session_id}/workspace"
        return int(self.podman.run("exec", self.name, "stat", "-c", "%u", workspace).stdout)

    def remove(self) -> None:
        self.podman.run("rm", "-f", self.name, check=False)
        self.podman.run("volume", "rm", "-f", f"{self.name}-data", check=False)


@pytest.mark.timeout(1500)
def test_bash_call_runs_sandboxed_as_its_own_uid(
    podman: Podman, images: Images, fake: FakeModelServer
) -> None:
    with podman.phase("single container: start"):
        solo = Solo(podman, images, fake, *SANDBOX_PRIVILEGES)
    try:
        with podman.phase("single container: bash turn"):
            session_id, result = solo.bash_turn()
        output = result.content[0].text
        assert not result.is_error, output
        # uid 1000 inside the sandbox's own user namespace; the file really written.
        assert output.splitlines() == ["1000", "written"], output
        assert DEFAULT_UID_RANGE[0] <= solo.workspace_owner(session_id) <= DEFAULT_UID_RANGE[1]
    finally:
        solo.remove()


@pytest.mark.timeout(600)
def test_in_a_user_namespace_the_uid_range_must_be_a_mapped_one(
    podman: Podman, images: Images, fake: FakeModelServer
) -> None:
    """The default range is not mapped: the server refuses to start, naming the setting
    (before, every tool call failed with a bare EINVAL); the setting docs/deploy.md gives puts
    sandboxes on mapped uids and the call runs."""
    with pytest.raises(AssertionError) as refused:
        Solo(podman, images, fake, *SANDBOX_PRIVILEGES, *USERNS)
    message = str(refused.value)
    assert "container exited" in message, message
    assert "CORRAL_SANDBOX_UID_RANGE" in message and "maps 0-65535" in message, message
    assert "Traceback" not in message, message
    mapped = ("-e", "CORRAL_SANDBOX_UID_RANGE=50000-65000")
    solo = Solo(podman, images, fake, *SANDBOX_PRIVILEGES, *USERNS, *mapped)
    try:
        session_id, result = solo.bash_turn()
        assert not result.is_error, result.content[0].text
        assert 50000 <= solo.workspace_owner(session_id) <= 65000
    finally:
        solo.remove()


@pytest.mark.timeout(600)
def test_without_the_privileges_the_tool_call_fails_and_says_why(
    podman: Podman, images: Images, fake: FakeModelServer
) -> None:
    """The documented privileges are needed: without them the sandbox cannot start."""
    solo = Solo(podman, images, fake)
    try:
        _, result = solo.bash_turn()
        assert result.is_error
        assert "provision_failed" in result.content[0].text
    finally:
        solo.remove()


@pytest.mark.timeout(600)
def test_config_check_runs_in_the_image_and_names_a_bad_variable(
    podman: Podman, images: Images
) -> None:
    """The entrypoint takes any corral command (docs/deploy.md: `config check`)."""
    ok = podman.run("run", "--rm", "-e", f"CORRAL_API_KEYS={API_KEY}", images.corral,
                    "config", "check", check=False)  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = podman.run("run", "--rm", "-e", "CORRAL_WORKERS=abc", images.corral,
                     "config", "check", check=False)  # fmt: skip
    assert bad.returncode == 2
    assert "CORRAL_WORKERS" in bad.stderr + bad.stdout
