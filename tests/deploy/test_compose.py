"""deploy/compose.yaml as written: PostgreSQL, an API-only server and two workers. A session
runs a bash call through the API; the worker holding the session is killed while the model
answers the next step, and the other worker finishes the turn."""

from __future__ import annotations

import base64
import os
import secrets
import subprocess
from collections.abc import Iterator

import anthropic
import psycopg
import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.deploy.conftest import HERE, ROOT, Images
from tests.deploy.podman import Podman
from tests.deploy.support import TOOLSET, wait_for_requests, wait_healthy
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import free_port

API_KEY = "crl_deploy_" + secrets.token_hex(8)
PASSWORD = secrets.token_hex(12)
WORKERS = ("worker-1", "worker-2")


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    """Bash, then a slow answer (the kill lands in it), then the survivor's answer."""
    turns = [
        Turn([ToolUse("bash", {"command": "echo from-the-sandbox; id -u"})]),
        Turn([Text("never completed")], first_token_delay=120),
        Turn([Text("finished by the other worker")]),
    ]
    with FakeModelServer(turns) as fake:
        yield fake


class Stack:
    """One `podman-compose` project of deploy/compose.yaml plus the test override."""

    def __init__(self, podman: Podman, images: Images, model_url: str) -> None:
        self.podman = podman
        self.project = f"corral-test-{secrets.token_hex(4)}"
        self.api_port, self.db_port = free_port(), free_port()
        self.files = [
            "-f",
            str(ROOT / "deploy" / "compose.yaml"),
            "-f",
            str(HERE / "compose.test.yaml"),
        ]
        vault_key = base64.urlsafe_b64encode(os.urandom(32)).decode()
        podman.env.update(
            CORRAL_IMAGE=images.corral, CORRAL_POSTGRES_IMAGE=images.postgres,
            CORRAL_API_KEYS=API_KEY, CORRAL_VAULT_KEY=vault_key, POSTGRES_PASSWORD=PASSWORD,
            ANTHROPIC_API_KEY="sk-test", CORRAL_DB_HOST="127.0.0.1",
            CORRAL_DB_PORT=str(self.db_port), CORRAL_TEST_API_PORT=str(self.api_port),
            CORRAL_TEST_MODEL_URL=model_url,
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def database_url(self) -> str:
        return f"postgresql://corral:{PASSWORD}@127.0.0.1:{self.db_port}/corral"

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.podman.compose("-p", self.project, *self.files, *args, timeout=timeout)

    def container(self, service: str) -> str:
        """podman-compose's name for a service's (only) container."""
        return f"{self.project}_{service}_1"

    def logs(self) -> str:
        out = []
        for service in ("db", "api", *WORKERS):
            done = self.podman.run("logs", "--tail", "40", self.container(service), check=False)
            out.append(f"--- {service}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        return "\n".join(out)


def writers(database_url: str, session_id: str, kind: str) -> list[str]:
    """The hostname of the process that appended each `kind` event of the session."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT writer_owner FROM events WHERE session_id = %s AND type = %s ORDER BY seq",
            (session_id, kind),
        ).fetchall()
    return [str(owner).split(":")[0] for (owner,) in rows]


@pytest.mark.timeout(1800)
def test_compose_stack_runs_bash_and_survives_a_worker_kill(
    podman: Podman, images: Images, fake: FakeModelServer
) -> None:
    stack = Stack(podman, images, fake.url)
    try:
        with podman.phase("compose: up"):
            stack.compose("up", "-d")
            wait_healthy(stack.url, timeout=120)
        with podman.phase("compose: bash turn to the kill"):
            client = anthropic.Anthropic(base_url=stack.url, api_key=API_KEY, max_retries=0)
            session_id, _ = make_session(client, tools=[TOOLSET])
            say(client, session_id, "run it")
            wait_for_requests(fake, 2, timeout=120)
            [result] = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
            assert not result.is_error, result.content[0].text
            assert result.content[0].text.splitlines() == ["from-the-sandbox", "1000"]
            [holder] = writers(stack.database_url, session_id, "agent.tool_result")
            assert holder in WORKERS
        with podman.phase("compose: kill + takeover"):
            podman.run("kill", stack.container(holder))
            wait_idle(client, session_id, stop="end_turn", timeout=120)
        log = events(client, session_id)
        messages = [e.content[0].text for e in log if e.type == "agent.message"]
        assert messages == ["finished by the other worker"]
        [survivor] = set(WORKERS) - {holder}
        assert writers(stack.database_url, session_id, "agent.message") == [survivor]
        assert len(fake.requests) == 3
    except BaseException:
        print(stack.logs())
        raise
    finally:
        with podman.phase("compose: down"):
            stack.compose("down", "-v", timeout=300)
