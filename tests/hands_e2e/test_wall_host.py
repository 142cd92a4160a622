"""The sandbox is nobody on the host, end to end: SDK -> server (root) -> bubblewrap.

A model that swaps the skills directory for a symlink to a host directory and kills its
sandbox gets nothing created there when the next call provisions a new one; what it wrote
belongs to its session's uid, inside a data dir no other uid can enter.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import ServerProcess

pytestmark = [
    pytest.mark.bwrap,
    pytest.mark.skipif(os.geteuid() != 0, reason="the server switches uids only as root"),
]
TOOLSET = {"type": "agent_toolset_20260401"}
SKILL_MD = b"---\nname: incident-triage-runbook\ndescription: How to triage pages\n---\nStep 1"
RUNBOOK = "/mnt/skills/incident-triage-runbook/SKILL.md"


def test_a_planted_skills_symlink_creates_nothing_on_the_host(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    target = tmp_path / "host-target"
    target.mkdir()
    client = server.client()
    skill = client.beta.skills.create(
        files=[("incident-triage-runbook/SKILL.md", SKILL_MD, "text/markdown")]
    )
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="planter",
        tools=[TOOLSET],  # type: ignore[list-item]
        skills=[{"type": "custom", "skill_id": skill.id}],
    )
    env = client.beta.environments.create(name="e")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    plant = (
        "mkdir -p /workspace/old && { mv /workspace/skills /workspace/old/ 2>/dev/null; true; } "
        f"&& ln -sfn /oldroot{target} /workspace/skills && touch /workspace/mine && echo planted"
    )
    fake_model.reset(
        [
            Turn([ToolUse("bash", {"command": plant})]),
            Turn([ToolUse("bash", {"command": "kill -9 -1; sleep 5"})]),
            Turn([ToolUse("read", {"file_path": RUNBOOK})]),
            Turn([Text("done")]),
        ]
    )
    say(client, session.id, "go")
    wait_idle(client, session.id, stop="end_turn")
    results = [e for e in events(client, session.id) if e.type == "agent.tool_result"]
    assert results[0].content[0].text == "planted"
    assert results[1].is_error  # the sandbox died
    assert list(target.iterdir()) == []
    assert "Step 1" in results[2].content[0].text

    workspace = server.data_dir / "sessions" / session.id / "workspace"
    uid = workspace.stat().st_uid
    assert uid != 0 and (workspace / "mine").stat().st_uid == uid
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700
    for sub in ("", "sessions", "sandboxes", "blobs", "skills", "layers"):
        mode = stat.S_IMODE((server.data_dir / sub).stat().st_mode)
        assert mode == 0o700, f"{sub or 'data dir'}: {mode:o}"
