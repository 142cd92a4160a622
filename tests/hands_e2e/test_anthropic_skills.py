"""Anthropic skills by name through the SDK: `[skills.anthropic]` maps ids to the operator's
directories, mounted read-only at /mnt/skills/<name> in a real sandbox and described in the
system prompt; an unmapped id is a 400 naming the setting (docs/skills.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from corral.config import load_settings
from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import ServerProcess, backend_env

TOOLSET = {"type": "agent_toolset_20260401"}
SKILL_MD = "---\nname: xlsx\ndescription: Read and write spreadsheets\n---\nUse openpyxl.\n"


def skill_dir(root: Path) -> Path:
    path = root / "xlsx"
    path.mkdir()
    (path / "SKILL.md").write_text(SKILL_MD)
    (path / "recalc.py").write_text("print('recalculated')\n")
    root.chmod(0o755)
    path.chmod(0o755)
    for child in path.iterdir():
        child.chmod(0o644)
    return path


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("corral")
    skills = skill_dir(tmp_path_factory.mktemp("skills"))
    (data / "corral.toml").write_text(f'[skills.anthropic]\nxlsx = "{skills}"\n')
    with backend_env(backend) as env:
        proc = ServerProcess(data, model_url=fake_model.url, env=env).start()
        yield proc
        proc.stop()


def test_a_mapped_anthropic_skill_is_mounted_and_described(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="sheets",
        tools=[TOOLSET],  # type: ignore[list-item]
        skills=[{"type": "anthropic", "skill_id": "xlsx"}],
    )
    (skill,) = agent.skills
    assert (skill.type, skill.skill_id, skill.version) == ("anthropic", "xlsx", "latest")
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    fake_model.reset(
        [
            Turn([ToolUse("read", {"file_path": "/mnt/skills/xlsx/SKILL.md"})]),
            Turn([ToolUse("bash", {"command": "touch /mnt/skills/xlsx/x || echo read-only"})]),
            Turn([Text("done")]),
        ]
    )
    say(client, session.id, "make a sheet")
    wait_idle(client, session.id, stop="end_turn")
    results = [e for e in events(client, session.id) if e.type == "agent.tool_result"]
    assert "Use openpyxl." in results[0].content[0].text
    assert "read-only" in results[1].content[0].text
    system = fake_model.requests[0]["system"][0]["text"]
    assert "- xlsx: Read and write spreadsheets" in system


def test_an_unmapped_anthropic_skill_is_a_400_naming_the_setting(server: ServerProcess) -> None:
    client = server.client()
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.beta.agents.create(
            model="claude-sonnet-4-5",
            name="slides",
            skills=[{"type": "anthropic", "skill_id": "pptx"}],
        )
    message = str(refused.value)
    assert "skills.anthropic" in message and "pptx" in message and "xlsx" in message


def test_a_mapping_that_cannot_be_served_is_refused_at_startup(tmp_path: Path) -> None:
    config = tmp_path / "corral.toml"
    config.write_text(f'[skills.anthropic]\nxlsx = "{tmp_path / "missing"}"\n')
    with pytest.raises(ValueError, match=r"\[skills.anthropic\] xlsx: .* SKILL.md"):
        load_settings(environ={}, config_file=config)
    config.write_text('[skills.anthropic]\nxlsx = "relative/dir"\n')
    with pytest.raises(ValueError, match="absolute path"):
        load_settings(environ={}, config_file=config)
    (tmp_path / "ok").mkdir()
    good = skill_dir(tmp_path / "ok")
    config.write_text(f'[skills.anthropic]\nxlsx = "{good}"\n')
    assert load_settings(environ={}, config_file=config).anthropic_skills == {"xlsx": good}
