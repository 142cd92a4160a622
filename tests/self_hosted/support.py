"""Helpers of the self-hosted tests: keys from the real CLI, SDK workers as processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import anthropic

from tests.api.helpers import events
from tests.server import ServerProcess
from tests.uids import ENV_VALUE as UIDS

TOOLSET = {
    "type": "agent_toolset_20260401",
    "configs": [{"name": "write", "permission_policy": {"type": "always_ask"}}],
}


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """`corral ARGS --data-dir …` against the server's store, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CORRAL_"))}
    env.update(server.extra_env)
    env["CORRAL_CONFIG"] = str(server.data_dir / "corral.toml")  # ServerProcess created it
    return subprocess.run(
        [sys.executable, "-m", "corral", *args, "--data-dir", str(server.data_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # a loaded shared machine can take a minute to import
        check=False,
    )


def create_key(server: ServerProcess, environment_id: str) -> str:
    """A new environment key (stdout of `corral env-key create`)."""
    done = cli(server, "env-key", "create", environment_id)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def self_hosted_env(client: anthropic.Anthropic) -> str:
    """A new self_hosted environment's id."""
    return client.beta.environments.create(name="hands", config={"type": "self_hosted"}).id


class WorkerProcess:
    """The SDK's `EnvironmentWorker` (tests/self_hosted/sdk_worker.py) in its own process."""

    def __init__(
        self, server: ServerProcess, environment_id: str, key: str, workdir: Path, **env: str
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir.parent / f"{workdir.name}.log"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        child_env.update(env, CORRAL_ENVIRONMENT_KEY=key)
        command = self.command(server.url, environment_id, workdir)
        with self.log_path.open("ab") as log:
            self.proc = self.popen(command, child_env, log)

    def popen(
        self, command: list[str], env: dict[str, str], log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        """Start the worker in its own process group, logging to `log`."""
        return subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def command(self, url: str, environment_id: str, workdir: Path) -> list[str]:
        """The worker's command line."""
        module = "tests.self_hosted.sdk_worker"
        return [sys.executable, "-m", module, url, environment_id, str(workdir)]

    def log(self) -> str:
        """What the worker logged so far."""
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the worker's process group."""
        os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        """SIGKILL (if still alive) and reap."""
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


def wait_until(
    client: anthropic.Anthropic,
    session_id: str,
    match: Callable[[Any], bool],
    *,
    timeout: float = 60.0,
    what: str = "event",
) -> Any:
    """Poll the log until an event matches; returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in events(client, session_id):
            if match(event):
                return event
        time.sleep(0.05)
    raise AssertionError(f"no {what} in {[e.type for e in events(client, session_id)]}")


def results_for(log: list[Any], tool_use_id: str) -> list[Any]:
    """Every result event answering `tool_use_id`."""
    return [
        e
        for e in log
        if e.type in ("user.tool_result", "agent.tool_result") and e.tool_use_id == tool_use_id
    ]


def text_of(event: Any) -> str:
    """The text blocks of a result event, joined."""
    return "".join(getattr(block, "text", "") for block in event.content or [])


class HandsProcess(WorkerProcess):
    """`corral hands` (Corral's own worker, bubblewrap sandboxes) in its own process."""

    def __init__(
        self,
        server: ServerProcess,
        environment_id: str,
        key: str,
        workdir: Path,
        *,
        max_idle: float = 30.0,
        **env: str,
    ) -> None:
        self.max_idle = max_idle
        env.setdefault("CORRAL_SANDBOX_UID_RANGE", UIDS)
        env.setdefault("CORRAL_CONFIG", os.devnull)  # no config file
        super().__init__(server, environment_id, key, workdir, **env)

    def command(self, url: str, environment_id: str, workdir: Path) -> list[str]:
        """`corral hands --url … --environment … --workdir …`."""
        max_idle = str(self.max_idle)
        return [
            sys.executable, "-m", "corral", "hands", "--url", url, "--environment",
            environment_id, "--workdir", str(workdir), "--max-idle", max_idle,
        ]  # fmt: skip

    def executed(self) -> int:
        """How many tool calls the worker ran (from its log)."""
        return self.log().count(": running ")
