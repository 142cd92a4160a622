"""Files, skills, outputs and lazy sandboxes end to end: SDK -> server -> bubblewrap."""

from __future__ import annotations

import hashlib
import io
import os
import signal
import time
import zipfile

import anthropic
import httpx
import pytest

from tests.api.helpers import LOOKUP, events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import API_KEY, ServerProcess

TOOLSET = {"type": "agent_toolset_20260401"}
SKILL_MD = b"---\nname: incident-triage-runbook\ndescription: How to triage pages\n---\nStep 1"


def status(server: ServerProcess) -> dict[str, object]:
    response = httpx.get(f"{server.url}/v1/admin/status", headers={"x-api-key": API_KEY})
    return response.json()["sandboxes"]  # type: ignore[no-any-return]


def last_result(client: anthropic.Anthropic, session_id: str) -> str:
    results = [e for e in events(client, session_id) if e.type == "agent.tool_result"]
    return results[-1].content[0].text  # type: ignore[no-any-return]


def test_mounted_file_grep_output_and_skill(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    log = b"".join(
        f"line {i} {'ERROR pool exhausted' if i % 7 == 0 else 'ok'}\n".encode() for i in range(1000)
    )
    uploaded = client.beta.files.upload(file=("app.log", log, "text/plain"))
    assert uploaded.size_bytes == len(log)
    skill = client.beta.skills.create(
        files=[("incident-triage-runbook/SKILL.md", SKILL_MD, "text/markdown")],
        display_name="Runbook",
    )
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="sre",
        system="Triage.",
        tools=[TOOLSET],  # type: ignore[list-item]
        skills=[{"type": "custom", "skill_id": skill.id}],
    )
    assert agent.skills[0].version == skill.latest_version_id
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session = client.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[{"type": "file", "file_id": uploaded.id, "mount_path": "app.log"}],
    )
    assert session.resources[0].mount_path == "/mnt/session/uploads/app.log"  # type: ignore[union-attr]
    fake_model.reset(
        [
            Turn([ToolUse("read", {"file_path": "/mnt/skills/incident-triage-runbook/SKILL.md"})]),
            Turn([ToolUse("bash", {"command": "grep -c ERROR /mnt/session/uploads/app.log"})]),
            Turn(
                [
                    ToolUse(
                        "bash",
                        {
                            "command": "mkdir -p /mnt/session/outputs && "
                            "grep ERROR /mnt/session/uploads/app.log "
                            "> /mnt/session/outputs/errors.txt"
                        },
                    )
                ]
            ),
            Turn([Text("done")]),
        ]
    )
    say(client, session.id, "triage")
    wait_idle(client, session.id, stop="end_turn")
    results = [e for e in events(client, session.id) if e.type == "agent.tool_result"]
    assert "Step 1" in results[0].content[0].text
    assert results[1].content[0].text.strip() == str(sum(1 for i in range(1000) if i % 7 == 0))
    system = fake_model.requests[0]["system"][0]["text"]
    assert "incident-triage-runbook" in system and "How to triage pages" in system
    outputs = list(client.beta.files.list(scope_id=session.id))
    assert [f.filename for f in outputs] == ["errors.txt"]
    data = client.beta.files.download(outputs[0].id).read()
    expected = b"".join(line + b"\n" for line in log.splitlines() if b"ERROR" in line)
    assert hashlib.sha256(data).digest() == hashlib.sha256(expected).digest()
    archive = client.beta.skills.versions.download(skill.latest_version_id, skill_id=skill.id)
    names = zipfile.ZipFile(io.BytesIO(archive.read())).namelist()
    assert names == ["incident-triage-runbook/SKILL.md"]


def test_lazy_provisioning(server: ServerProcess, fake_model: FakeModelServer) -> None:
    client = server.client()
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5", name="lazy", tools=[TOOLSET, LOOKUP]
    )  # type: ignore[list-item]
    env = client.beta.environments.create(name="e")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    before = status(server)["provisioned_total"]
    fake_model.reset(
        [
            Turn([Text("no tools needed")]),
            Turn([ToolUse("bash", {"command": "echo $$ > /tmp/pid; echo one"})]),
            Turn([Text("ran")]),
            Turn([ToolUse("bash", {"command": "echo two"})]),
            Turn([Text("ran again")]),
        ]
    )
    say(client, session.id, "just talk")
    wait_idle(client, session.id, stop="end_turn")
    assert status(server)["provisioned_total"] == before, "a text-only turn made a sandbox"
    n = len(events(client, session.id))
    say(client, session.id, "use bash")
    wait_idle(client, session.id, stop="end_turn", after=n)
    assert status(server)["provisioned_total"] == before + 1
    n = len(events(client, session.id))
    say(client, session.id, "again")
    wait_idle(client, session.id, stop="end_turn", after=n)
    assert status(server)["provisioned_total"] == before + 1, "later turns reuse the sandbox"
    assert last_result(client, session.id).strip() == "two"


def test_always_ask_allow_and_deny(server: ServerProcess, fake_model: FakeModelServer) -> None:
    client = server.client()
    ask = {
        "type": "agent_toolset_20260401",
        "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
    }
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="ask", tools=[ask])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    fake_model.reset(
        [
            Turn([ToolUse("bash", {"command": "echo allowed > /workspace/a"})]),
            Turn([ToolUse("bash", {"command": "echo denied > /workspace/d"})]),
            Turn([Text("finished")]),
        ]
    )
    say(client, session.id, "go")
    idle = wait_idle(client, session.id, stop="requires_action")
    use = next(e for e in events(client, session.id) if e.type == "agent.tool_use")
    assert use.evaluated_permission == "ask" and idle.stop_reason.event_ids == [use.id]
    client.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"}],
    )
    n = len(events(client, session.id))
    idle = wait_idle(client, session.id, stop="requires_action", after=n)
    second = idle.stop_reason.event_ids[0]
    client.beta.sessions.events.send(
        session.id,
        events=[
            {
                "type": "user.tool_confirmation",
                "tool_use_id": second,
                "result": "deny",
                "deny_message": "not on prod",
            }
        ],
    )
    wait_idle(client, session.id, stop="end_turn")
    workspace = server.data_dir / "sessions" / session.id / "workspace"
    assert (workspace / "a").read_text() == "allowed\n"
    assert not (workspace / "d").exists()
    told = fake_model.requests[-1]["messages"][-1]["content"][0]
    assert told["is_error"] and "not on prod" in told["content"][0]["text"]


def test_file_api_bad_input(server: ServerProcess) -> None:
    client = server.client()
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata("file_missing")
    raw = httpx.post(
        f"{server.url}/v1/files", headers={"x-api-key": API_KEY}, content=b"not multipart"
    )
    assert raw.status_code == 400
    with pytest.raises(anthropic.BadRequestError):
        client.beta.skills.create(files=[("SKILL.md", b"no folder", "text/markdown")])
    env = client.beta.environments.create(name="e")
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="f")
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            resources=[{"type": "file", "file_id": "file_missing"}],
        )
    assert "file_id" in info.value.message
    uploaded = client.beta.files.upload(file=("../../etc/passwd", b"x", "text/plain"))
    assert uploaded.filename == "passwd"
    with pytest.raises(anthropic.BadRequestError):
        client.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            resources=[{"type": "file", "file_id": uploaded.id, "mount_path": "/etc/passwd"}],
        )
    assert client.beta.files.delete(uploaded.id).type == "file_deleted"


def sandbox_pid(server: ServerProcess, session_id: str) -> int:
    live = status(server)["sandboxes"]
    assert isinstance(live, list)
    return int(next(s["pid"] for s in live if s["session_id"] == session_id))


def test_sandbox_death_between_and_during_calls(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="die", tools=[TOOLSET])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    fake_model.reset(
        [
            Turn([ToolUse("bash", {"command": "echo kept > /workspace/keep.txt; echo written"})]),
            Turn([Text("written")]),
            Turn([ToolUse("bash", {"command": "cat /workspace/keep.txt"})]),
            Turn([Text("read after a kill between calls")]),
            Turn([ToolUse("bash", {"command": "sleep 30"})]),
            Turn([ToolUse("bash", {"command": "cat /workspace/keep.txt"})]),
            Turn([Text("recovered")]),
        ]
    )
    say(client, session.id, "write")
    wait_idle(client, session.id, stop="end_turn")
    before = status(server)["provisioned_total"]
    os.kill(sandbox_pid(server, session.id), signal.SIGKILL)
    n = len(events(client, session.id))
    say(client, session.id, "read")
    wait_idle(client, session.id, stop="end_turn", after=n)
    assert last_result(client, session.id).strip() == "kept"
    assert status(server)["provisioned_total"] == before + 1
    n = len(events(client, session.id))
    say(client, session.id, "sleep, then read")
    deadline = time.monotonic() + 20
    while not any(
        e.type == "agent.tool_use" and e.input.get("command") == "sleep 30"
        for e in events(client, session.id)[n:]
    ):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(sandbox_pid(server, session.id), signal.SIGKILL)
    wait_idle(client, session.id, stop="end_turn", after=n)
    results = [e for e in events(client, session.id)[n:] if e.type == "agent.tool_result"]
    assert results[0].is_error and "sandbox" in results[0].content[0].text.lower()
    assert not results[1].is_error and results[1].content[0].text.strip() == "kept"


def test_model_driven_bash_cannot_see_the_server(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    """What the model can run must not reveal keys, the data dir, the database or the host."""
    client = server.client()
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="adv", tools=[TOOLSET])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    data = server.data_dir
    probes = [
        "env; cat /proc/1/environ /proc/self/environ | tr '\\0' '\\n'",
        f"ls -la {data} {data}/corral.db 2>&1; cat {data}/api_key 2>&1",
        "grep -E 'CapEff|NoNewPrivs|Seccomp:' /proc/self/status; id -u",
        "ps -eo pid,user,args 2>&1 | head -50",
        f"curl -sS -m 5 http://127.0.0.1:{server.port}/health 2>&1; echo",
    ]
    fake_model.reset([Turn([ToolUse("bash", {"command": p}) for p in probes]), Turn([Text("ok")])])
    say(client, session.id, "probe")
    wait_idle(client, session.id, stop="end_turn")
    outputs = [
        e.content[0].text for e in events(client, session.id) if e.type == "agent.tool_result"
    ]
    everything = "\n".join(outputs)
    for secret in ("sk-test-secret", "test-key", "CORRAL_API_KEYS", "ANTHROPIC"):
        assert secret not in everything, secret
    assert "No such file" in outputs[1]
    assert "CapEff:\t0000000000000000" in outputs[2] and "NoNewPrivs:\t1" in outputs[2]
    assert "Seccomp:\t2" in outputs[2] and outputs[2].strip().endswith("1000")
    assert "corral serve" not in outputs[3]
    assert '"status":"ok"' not in outputs[4]
