"""deploy/systemd's units, installed as docs/deploy.md says into the image with systemd as
PID 1 (CI hosts have no systemd of their own), started with systemctl: the embedded unit runs
a bash call with all its hardening and is restarted after a crash; the API and worker units
run a bash call against PostgreSQL."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.deploy.conftest import HERE, ROOT, Images
from tests.deploy.podman import Podman
from tests.deploy.support import TOOLSET, wait_healthy
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import DATABASE_URL_ENV, free_port, fresh_postgres

API_KEY = "crl_deploy_" + secrets.token_hex(8)
SANDBOX_PRIVILEGES = ("--cap-add", "SYS_ADMIN", "--security-opt", "unmask=/proc/*")


@dataclass
class Host:
    """A running container with systemd and the units."""

    podman: Podman
    name: str

    def sh(self, script: str) -> str:
        return self.podman.run("exec", self.name, "sh", "-c", script).stdout

    def configure(self, env: dict[str, str], unit: str, exec_start: str) -> None:
        """Append to /etc/corral/corral.env; a drop-in giving `unit` its test ExecStart."""
        lines = "".join(f"{k}={v}\n" for k, v in env.items())
        self.sh(f"printf '%s' '{lines}' >> /etc/corral/corral.env")
        dropin = f"/etc/systemd/system/{unit}.d"
        self.sh(
            f"mkdir -p {dropin} && printf '[Service]\\nExecStart=\\nExecStart={exec_start}\\n'"
            f" > {dropin}/test.conf && systemctl daemon-reload"
        )

    def system_state(self) -> str:
        """`systemctl is-system-running`: "running" once booted."""
        done = self.podman.run("exec", self.name, "systemctl", "is-system-running", check=False)
        return done.stdout.strip()

    def journal(self, *units: str) -> str:
        args = " ".join(f"-u {u}" for u in units)
        return self.podman.run(
            "exec", self.name, "journalctl", *args.split(), "--no-pager", "-n", "60", check=False
        ).stdout


@pytest.fixture(scope="module")
def host(podman: Podman, images: Images) -> Iterator[Host]:
    with podman.phase("systemd: build + boot"):
        tag = "localhost/corral-systemd:test"
        podman.run(
            "build", "--pull=never", "--build-arg", f"CORRAL_IMAGE={images.corral}",
            "-f", str(HERE / "systemd.Containerfile"), "-t", tag,
            str(ROOT / "deploy" / "systemd"), timeout=600,
        )  # fmt: skip
        name = f"corral-systemd-{secrets.token_hex(4)}"
        podman.run(
            "run", "-d", "--name", name, "--network", "host", "--systemd=always",
            *SANDBOX_PRIVILEGES, tag,
        )  # fmt: skip
        box = Host(podman, name)
        deadline = time.monotonic() + 60
        while box.system_state() not in ("running", "degraded"):
            assert time.monotonic() < deadline, "systemd did not boot"
            time.sleep(0.5)
    try:
        yield box
    finally:
        podman.run("rm", "-f", name, check=False)


def bash_turn(url: str) -> str:
    """One session whose turn runs a bash call; its output."""
    client = anthropic.Anthropic(base_url=url, api_key=API_KEY, max_retries=0)
    session_id, _ = make_session(client, tools=[TOOLSET])
    say(client, session_id, "run it")
    wait_idle(client, session_id, stop="end_turn", timeout=90)
    [result] = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
    assert not result.is_error, result.content[0].text
    return str(result.content[0].text)


def script() -> list[Turn]:
    return [Turn([ToolUse("bash", {"command": "id -u; echo from-systemd"})]), Turn([Text("ok")])]


@pytest.mark.timeout(1500)
def test_embedded_unit_runs_bash_hardened_and_restarts_after_a_crash(
    host: Host, podman: Podman
) -> None:
    port = free_port()
    with FakeModelServer(script() * 2) as fake:
        env = {
            "CORRAL_API_KEYS": API_KEY,
            "ANTHROPIC_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": fake.url,
        }
        host.configure(
            env, "corral.service", f"/opt/corral/bin/corral serve --host 127.0.0.1 --port {port}"
        )
        url = f"http://127.0.0.1:{port}"
        try:
            with podman.phase("systemd: corral.service bash turn"):
                host.sh("systemctl start corral")
                wait_healthy(url, timeout=60)
                assert bash_turn(url).splitlines() == ["1000", "from-systemd"]
            with podman.phase("systemd: crash + Restart=always"):
                pid = host.sh("systemctl show -p MainPID --value corral").strip()
                host.sh("systemctl kill -s KILL corral")
                deadline = time.monotonic() + 30
                while host.sh("systemctl show -p MainPID --value corral").strip() in (pid, "0"):
                    assert time.monotonic() < deadline, host.journal("corral")
                    time.sleep(0.3)
                wait_healthy(url, timeout=60)
                assert bash_turn(url).splitlines() == ["1000", "from-systemd"]
        except BaseException:
            print(host.journal("corral"))
            raise
        finally:
            host.sh("systemctl stop corral")


@pytest.mark.timeout(1500)
@pytest.mark.skipif(not os.environ.get(DATABASE_URL_ENV), reason=f"{DATABASE_URL_ENV} is not set")
def test_api_and_worker_units_run_bash_on_postgres(host: Host, podman: Podman) -> None:
    port = free_port()
    units = ("corral-api", "corral-worker@1", "corral-worker@2")
    with fresh_postgres("corral_systemd") as database_url, FakeModelServer(script()) as fake:
        env = {
            "CORRAL_API_KEYS": API_KEY, "ANTHROPIC_API_KEY": "sk-test",
            "ANTHROPIC_BASE_URL": fake.url, "CORRAL_DATABASE_URL": database_url,
        }  # fmt: skip
        host.configure(
            env, "corral-api.service",
            f"/opt/corral/bin/corral serve --host 127.0.0.1 --port {port} --workers 0",
        )  # fmt: skip
        try:
            with podman.phase("systemd: api + 2 workers bash turn"):
                host.sh(f"systemctl start {' '.join(units)}")
                wait_healthy(f"http://127.0.0.1:{port}", timeout=60)
                assert bash_turn(f"http://127.0.0.1:{port}").splitlines() == [
                    "1000",
                    "from-systemd",
                ]
        except BaseException:
            print(host.journal(*units))
            raise
        finally:
            host.sh(f"systemctl stop {' '.join(units)}")
