"""What multi-agent configurations this server cannot run is refused when saved (400 naming
the field), and thread endpoints answer unknown threads with 404 `thread_not_found`."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.server import ServerProcess

MODEL = "claude-sonnet-4-5"


@pytest.fixture
def client(server: ServerProcess) -> anthropic.Anthropic:
    return server.client()


def worker(client: anthropic.Anthropic, **extra: Any) -> str:
    return client.beta.agents.create(model=MODEL, name="w", **extra).id


def create(client: anthropic.Anthropic, multiagent: Any, **extra: Any) -> Any:
    return client.beta.agents.create(model=MODEL, name="c", multiagent=multiagent, **extra)


@pytest.mark.parametrize(
    ("build", "named"),
    [
        (lambda w, c: {"type": "coordinator", "agents": []}, "multiagent.agents"),
        (lambda w, c: {"type": "coordinator", "agents": [c]}, "multiagent.agents[0]"),
        (lambda w, c: {"type": "coordinator", "agents": [w, w]}, "multiagent.agents[1]"),
        (lambda w, c: {"type": "coordinator", "agents": [{"type": "self"}]}, "agents[0].type"),
        (
            lambda w, c: {"type": "coordinator", "agents": [{"type": "advisor", "model": MODEL}]},
            "multiagent.agents[0].type",
        ),
        (lambda w, c: {"type": "coordinator", "agents": ["agent_nope"]}, "agents[0]"),
        (
            lambda w, c: {
                "type": "multiagent_20261001",
                "subagents": {"type": "enabled", "inline_agents": {"type": "enabled"}},
            },
            "multiagent.subagents.inline_agents",
        ),
        (
            lambda w, c: {"type": "multiagent_20261001", "advisor": {"type": "enabled"}},
            "multiagent.advisor",
        ),
        (lambda w, c: {"type": "swarm"}, "multiagent.type"),
    ],
)
def test_unrunnable_rosters_are_refused_at_save_time(
    client: anthropic.Anthropic, build: Any, named: str
) -> None:
    plain = worker(client)
    coord = create(client, {"type": "coordinator", "agents": [plain]}).id
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(client, build(plain, coord))
    assert named in str(caught.value)


def test_a_coordinator_may_not_use_a_thread_tool_name(
    client: anthropic.Anthropic,
) -> None:
    plain = worker(client)
    reserved = {
        "type": "custom",
        "name": "corral_thread_wait",
        "description": "x",
        "input_schema": {"type": "object"},
    }
    with pytest.raises(anthropic.BadRequestError, match="reserved"):
        create(client, {"type": "coordinator", "agents": [plain]}, tools=[reserved])


def test_the_2026_form_resolves_its_predefined_agents(client: anthropic.Anthropic) -> None:
    plain = worker(client)
    made = create(
        client,
        {
            "type": "multiagent_20261001",
            "subagents": {
                "type": "enabled",
                "inline_agents": {"type": "disabled"},
                "predefined_agents": [plain],
            },
        },
    )
    stored = client.beta.agents.retrieve(made.id).multiagent
    assert stored is not None
    dumped = stored.model_dump()
    assert dumped["subagents"]["predefined_agents"] == [
        {"type": "agent", "id": plain, "version": 1}
    ]


def test_unknown_threads_are_404s(client: anthropic.Anthropic) -> None:
    plain = worker(client)
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session = client.beta.sessions.create(agent=plain, environment_id=env.id)
    threads = list(client.beta.sessions.threads.list(session.id))
    assert [t.parent_thread_id for t in threads] == [None]  # the primary thread only
    with pytest.raises(anthropic.NotFoundError, match="thread_not_found|not found"):
        client.beta.sessions.threads.retrieve("sthr_nope", session_id=session.id)
    with pytest.raises(anthropic.BadRequestError, match="session_thread_id"):
        client.beta.sessions.events.send(
            session.id, events=[{"type": "user.interrupt", "session_thread_id": "sthr_nope"}]
        )
    with pytest.raises(anthropic.BadRequestError, match="primary"):
        client.beta.sessions.threads.archive(threads[0].id, session_id=session.id)
