"""A live sandbox follows its session row, in the embedded server: resources added or removed
show at the next tool call, archiving destroys the sandbox, deleting removes the session's
directory from disk without following links the sandbox planted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import anthropic
import httpx

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import API_KEY, ServerProcess

TOOLSET = {"type": "agent_toolset_20260401"}


def run_bash(
    client: anthropic.Anthropic, fake: FakeModelServer, session_id: str, command: str
) -> str:
    """One turn in which the model runs `command`; returns the tool result's text."""
    fake.reset([Turn([ToolUse("bash", {"command": command})]), Turn([Text("done")])])
    n = len(events(client, session_id))
    say(client, session_id, "run it")
    wait_idle(client, session_id, stop="end_turn", after=n)
    results = [e for e in events(client, session_id)[n:] if e.type == "agent.tool_result"]
    assert len(results) == 1
    return str(results[0].content[0].text)


def toolset_session(client: anthropic.Anthropic) -> str:
    """A session whose agent has the built-in tools."""
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="s", tools=[TOOLSET])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def sandbox_running(target: os.stat_result) -> bool:
    """Whether some process works in the directory `target` (a workspace's stat): the sandbox
    agent's cwd is /workspace, a bind mount of it. Works whichever process (server or worker)
    holds the sandbox, and still after the directory was unlinked."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.stat(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if (cwd.st_dev, cwd.st_ino) == (target.st_dev, target.st_ino):
            return True
    return False


def eventually(check: object, what: str, timeout: float = 30.0) -> None:
    """Poll `check()` until true (the holder of a sandbox notices changes on its next tick)."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def live_sandboxes(server: ServerProcess) -> list[str]:
    """Sessions with a sandbox in the server process, from the admin status."""
    response = httpx.get(f"{server.url}/v1/admin/status", headers={"x-api-key": API_KEY})
    return [s["session_id"] for s in response.json()["sandboxes"]["sandboxes"]]


def check_resources_follow(
    client: anthropic.Anthropic, fake: FakeModelServer, session_id: str
) -> None:
    """Add then delete a file resource while the session's sandbox is live."""
    cat = "cat /mnt/session/uploads/notes.txt 2>&1; cat /workspace/kept"
    first = run_bash(client, fake, session_id, f"echo kept > /workspace/kept; {cat}")
    assert "No such file" in first
    uploaded = client.beta.files.upload(file=("notes.txt", b"mounted later\n", "text/plain"))
    resource = client.beta.sessions.resources.add(
        session_id, type="file", file_id=uploaded.id, mount_path="notes.txt"
    )
    assert run_bash(client, fake, session_id, cat).split() == ["mounted", "later", "kept"]
    client.beta.sessions.resources.delete(resource.id, session_id=session_id)
    after = run_bash(client, fake, session_id, cat)
    assert "No such file" in after and "mounted later" not in after and "kept" in after


def test_resources_follow_a_live_sandbox_and_archive_destroys_it(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    session_id = toolset_session(client)
    check_resources_follow(client, fake_model, session_id)
    workspace = server.data_dir / "sessions" / session_id / "workspace"
    assert session_id in live_sandboxes(server) and sandbox_running(workspace.stat())
    client.beta.sessions.archive(session_id)
    eventually(lambda: session_id not in live_sandboxes(server), "archive left the sandbox")
    assert not sandbox_running(workspace.stat())
    assert (workspace / "kept").read_text() == "kept\n", "archiving keeps the workspace"


def test_delete_removes_the_session_directory_not_what_links_point_to(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    client = server.client()
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "precious").write_text("keep me")
    session_id = toolset_session(client)
    planted = (
        f"ln -s {canary} /workspace/link; ln -s {canary}/precious /workspace/file_link; "
        "mkdir -p /workspace/deep/er && echo x > /workspace/deep/er/f; "
        "echo out > /mnt/session/outputs/report.txt; echo planted"
    )
    assert run_bash(client, fake_model, session_id, planted).strip() == "planted"
    session_dir = server.data_dir / "sessions" / session_id
    assert (session_dir / "workspace" / "link").is_symlink()
    uid_claim = server.data_dir / "sandboxes" / "uids" / "by-session" / session_id
    assert uid_claim.exists() or os.geteuid() != 0, "a root server gives each session a uid"
    client.beta.sessions.delete(session_id)
    eventually(lambda: not session_dir.exists(), "the deleted session's directory stayed")
    eventually(lambda: not uid_claim.exists(), "the deleted session's uid was not freed")
    eventually(lambda: session_id not in live_sandboxes(server), "delete left the sandbox")
    assert (canary / "precious").read_text() == "keep me"


def test_delete_without_a_sandbox_removes_the_directory_at_once(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    session_id = toolset_session(client)
    assert (
        run_bash(client, fake_model, session_id, "echo x > /workspace/f; echo ok").strip() == "ok"
    )
    client.beta.sessions.archive(session_id)
    eventually(lambda: session_id not in live_sandboxes(server), "archive left the sandbox")
    session_dir = server.data_dir / "sessions" / session_id
    assert session_dir.exists()
    client.beta.sessions.delete(session_id)
    assert not session_dir.exists()
