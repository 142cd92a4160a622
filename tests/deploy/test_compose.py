"""deploy/compose.yaml as written: PostgreSQL, an API-only server and two workers on the
stack's own network. A session runs a bash call through the published API port; the worker
holding the session is killed while the model answers the next step, and the other worker
finishes the turn."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import time
from pathlib import Path

import anthropic
import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.deploy.conftest import HERE, ROOT, Images
from tests.deploy.podman import Podman
from tests.deploy.support import TOOLSET, wait_healthy
from tests.server import free_port

API_KEY = "crl_deploy_" + secrets.token_hex(8)
WORKERS = ("worker-1", "worker-2")
SERVICES = ("db", "model", "api", *WORKERS)
# Bash, then a slow answer (the kill lands in it), then the survivor's answer.
SCRIPT = [
    {
        "blocks": [
            {"type": "tool_use", "name": "bash", "input": {"command": "echo sandboxed; id -u"}}
        ]
    },
    {"blocks": [{"type": "text", "text": "never completed"}], "first_token_delay": 120},
    {"blocks": [{"type": "text", "text": "finished by the other worker"}]},
]


class Stack:
    """One `podman-compose` project of deploy/compose.yaml plus the test override."""

    def __init__(self, podman: Podman, images: Images, tmp: Path) -> None:
        self.podman = podman
        self.project = f"corral-test-{secrets.token_hex(4)}"
        self.port = free_port()
        override = HERE / "compose.test.yaml"
        self.files = ["-f", str(ROOT / "deploy" / "compose.yaml"), "-f", str(override)]
        script = tmp / "script.json"
        script.write_text(json.dumps(SCRIPT))
        podman.env.update(
            CORRAL_IMAGE=images.corral, CORRAL_POSTGRES_IMAGE=images.postgres,
            CORRAL_API_KEYS=API_KEY, POSTGRES_PASSWORD=secrets.token_hex(12),
            CORRAL_VAULT_KEY=base64.urlsafe_b64encode(os.urandom(32)).decode(),
            ANTHROPIC_API_KEY="sk-test", CORRAL_PORT=f"127.0.0.1:{self.port}",
            CORRAL_TEST_TESTS_DIR=str(ROOT / "tests"), CORRAL_TEST_SCRIPT=str(script),
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.podman.compose("-p", self.project, *self.files, *args, timeout=timeout)

    def container(self, service: str) -> str:
        """podman-compose's name for a service's (only) container."""
        return f"{self.project}_{service}_1"

    def wait_for_database(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        db = self.container("db")
        while self.podman.run("exec", db, "pg_isready", "-h", "127.0.0.1", check=False).returncode:
            assert time.monotonic() < deadline, "PostgreSQL did not start"
            time.sleep(0.3)

    def model_requests(self) -> int:
        """How many requests the fake model has had."""
        code = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8099/requests').read().decode())"
        return int(self.podman.run("exec", self.container("model"), "python3", "-c", code).stdout)

    def writers(self, session_id: str, kind: str) -> list[str]:
        """The hostname of the process that appended each `kind` event of the session."""
        query = (
            f"SELECT writer_owner FROM events WHERE session_id = '{session_id}' "
            f"AND type = '{kind}' ORDER BY seq"
        )
        out = self.podman.run(
            "exec", self.container("db"), "psql", "-U", "corral", "-d", "corral", "-Atc", query
        ).stdout
        return [line.split(":")[0] for line in out.split()]

    def logs(self) -> str:
        out = []
        for service in SERVICES:
            done = self.podman.run("logs", "--tail", "40", self.container(service), check=False)
            out.append(f"--- {service}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return "\n".join(out)


@pytest.mark.timeout(1800)
def test_compose_stack_runs_bash_and_survives_a_worker_kill(
    podman: Podman, images: Images, tmp_path: Path
) -> None:
    stack = Stack(podman, images, tmp_path)
    try:
        with podman.phase("compose: up"):
            # PostgreSQL first: a worker that finds no database exits, and the test's workers
            # are not restarted (the API is, as in production).
            stack.compose("up", "-d", "db")
            stack.wait_for_database()
            stack.compose("up", "-d")
            wait_healthy(stack.url, timeout=120)
        with podman.phase("compose: bash turn to the kill"):
            client = anthropic.Anthropic(base_url=stack.url, api_key=API_KEY, max_retries=0)
            session_id, _ = make_session(client, tools=[TOOLSET])
            say(client, session_id, "run it")
            deadline = time.monotonic() + 120
            while stack.model_requests() < 2:
                assert time.monotonic() < deadline, "the second model request never came"
                time.sleep(0.3)
            [result] = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
            assert not result.is_error, result.content[0].text
            assert result.content[0].text.splitlines() == ["sandboxed", "1000"]
            [holder] = stack.writers(session_id, "agent.tool_result")
            assert holder in WORKERS
        with podman.phase("compose: kill + takeover"):
            podman.run("kill", stack.container(holder))
            wait_idle(client, session_id, stop="end_turn", timeout=120)
        log = events(client, session_id)
        messages = [e.content[0].text for e in log if e.type == "agent.message"]
        assert messages == ["finished by the other worker"]
        [survivor] = set(WORKERS) - {holder}
        assert stack.writers(session_id, "agent.message") == [survivor]
        assert stack.model_requests() == 3
    except BaseException:
        print(stack.logs())
        raise
    finally:
        with podman.phase("compose: down"):
            stack.compose("down", "-v", timeout=300)
