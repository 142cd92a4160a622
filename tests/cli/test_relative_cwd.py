"""The README's way to run Corral: `corral serve` (and `corral hands`) typed in whatever folder
the operator is in, with no data-dir flag and no config file.

Sandboxes and their launcher start from `/`, so a data dir left relative names nothing to them
(`//.corral/sandboxes/host-…/launch.py`): every sandbox tool failed with `provision_failed`.
These tests run bash, write and read through the SDK from such a folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import anthropic
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.hands.conftest import needs_bwrap
from tests.self_hosted.support import HandsProcess, create_key, self_hosted_env, text_of
from tests.server import API_KEY, ServerProcess
from tests.uids import ENV_VALUE as UIDS

pytestmark = [pytest.mark.bwrap, needs_bwrap]
TOOLSET = {"type": "agent_toolset_20260401"}
NOTE = "written from a relative folder"


def _user_env(**extra: str) -> dict[str, str]:
    """The operator's environment: nothing of Corral's or Anthropic's but what they set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CORRAL_"))}
    env.update(CORRAL_SANDBOX_UID_RANGE=UIDS, **extra)  # this pytest worker's uid slice
    return env


class ServerInFolder(ServerProcess):
    """`corral serve --port P [ARGS]` started in `folder`, as the README says to type it."""

    def __init__(self, folder: Path, model_url: str, args: tuple[str, ...] = ()) -> None:
        super().__init__(folder, model_url=model_url, args=args)
        self.folder = folder
        self.log_path = folder.parent / f"{folder.name}-server.log"

    def start(self) -> ServerInFolder:
        """Start in the folder and wait until /health answers."""
        env = _user_env(CORRAL_API_KEYS=API_KEY, ANTHROPIC_API_KEY="sk-test-secret")
        env["ANTHROPIC_BASE_URL"] = self.model_url or ""
        command = [sys.executable, "-m", "corral", "serve", "--port", str(self.port), *self.args]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command,
                cwd=self.folder,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_healthy()
        return self


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A fresh, empty working directory (not `/`)."""
    path = tmp_path / "here"
    path.mkdir()
    return path


def _script_tools(fake_model: FakeModelServer) -> None:
    fake_model.reset(
        [
            Turn([ToolUse("bash", {"command": "echo bash ran in $(pwd)"})]),
            Turn([ToolUse("write", {"file_path": "/workspace/note.txt", "content": NOTE})]),
            Turn([ToolUse("read", {"file_path": "/workspace/note.txt"})]),
            Turn([Text("done")]),
        ]
    )


def _run_tools(client: anthropic.Anthropic, environment_id: str, *, result_type: str) -> str:
    """One session whose turn calls bash, write and read; returns the session id after
    checking that each call succeeded."""
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="relative",
        tools=[TOOLSET],  # type: ignore[list-item]
    )
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment_id)
    say(client, session.id, "go")
    wait_idle(client, session.id, stop="end_turn", timeout=180)
    results = [e for e in events(client, session.id) if e.type == result_type]
    texts = [text_of(r) for r in results]
    assert len(results) == 3 and not any(r.is_error for r in results), texts
    assert "bash ran in /workspace" in texts[0]
    assert NOTE in texts[2]
    return session.id


@pytest.fixture
def started(folder: Path, fake_model: FakeModelServer) -> Iterator[list[ServerProcess]]:
    """Servers a test starts; stopped after it."""
    servers: list[ServerProcess] = []
    yield servers
    for server in servers:
        server.stop()


def test_serve_from_a_folder_runs_sandbox_tools_with_the_default_data_dir(
    folder: Path, fake_model: FakeModelServer, started: list[ServerProcess]
) -> None:
    server = ServerInFolder(folder, fake_model.url)
    started.append(server.start())
    client = server.client()
    _script_tools(fake_model)
    environment = client.beta.environments.create(name="here")
    session_id = _run_tools(client, environment.id, result_type="agent.tool_result")
    workspace = folder / ".corral" / "sessions" / session_id / "workspace"
    assert (workspace / "note.txt").read_text() == NOTE


def test_serve_with_a_relative_data_dir_flag_runs_sandbox_tools(
    folder: Path, fake_model: FakeModelServer, started: list[ServerProcess]
) -> None:
    server = ServerInFolder(folder, fake_model.url, args=("--data-dir", "relative/dir"))
    started.append(server.start())
    client = server.client()
    _script_tools(fake_model)
    environment = client.beta.environments.create(name="here")
    session_id = _run_tools(client, environment.id, result_type="agent.tool_result")
    workspace = folder / "relative" / "dir" / "sessions" / session_id / "workspace"
    assert (workspace / "note.txt").read_text() == NOTE
    assert not (folder / ".corral").exists()


class HandsInFolder(HandsProcess):
    """`corral hands --url … --environment …` started in `folder`: no --workdir, no --data-dir,
    no config file."""

    def __init__(self, server: ServerProcess, environment_id: str, key: str, folder: Path) -> None:
        self.folder = folder
        super().__init__(server, environment_id, key, folder.parent / "hands-log")

    def popen(
        self, command: list[str], env: dict[str, str], log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        """Start in the folder, with the operator's environment and nothing else."""
        key = env["CORRAL_ENVIRONMENT_KEY"]
        return subprocess.Popen(
            command,
            cwd=self.folder,
            env=_user_env(CORRAL_ENVIRONMENT_KEY=key),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def command(self, url: str, environment_id: str, workdir: Path) -> list[str]:
        """The README's `corral hands` line."""
        return [
            sys.executable, "-m", "corral", "hands", "--url", url,
            "--environment", environment_id, "--max-idle", str(self.max_idle),
        ]  # fmt: skip


def test_corral_hands_from_a_folder_runs_sandbox_tools_with_the_default_workdir(
    folder: Path, fake_model: FakeModelServer, started: list[ServerProcess], tmp_path: Path
) -> None:
    server = ServerProcess(tmp_path / "server", model_url=fake_model.url)
    started.append(server.start())
    client = server.client()
    environment_id = self_hosted_env(client)
    hands = HandsInFolder(server, environment_id, create_key(server, environment_id), folder)
    try:
        _script_tools(fake_model)
        session_id = _run_tools(client, environment_id, result_type="user.tool_result")
    finally:
        hands.stop()
    workspace = folder / ".corral" / "hands" / "sessions" / session_id / "workspace"
    assert (workspace / "note.txt").read_text() == NOTE


def test_demo_from_a_folder_leaves_the_folders_data_dir_alone(folder: Path) -> None:
    """The default data dir, now absolute, is still not the demo's: a `corral serve` started
    in this folder may own it."""
    (folder / ".corral").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "corral", "demo"],
        cwd=folder,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert list((folder / ".corral").iterdir()) == []
    assert (folder / "corral-demo-outputs" / "postmortem.md").is_file()
