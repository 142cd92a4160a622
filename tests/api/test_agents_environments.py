"""Agents and environments through the official SDK against a real server."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from tests.api.helpers import LOOKUP
from tests.server import ServerProcess

TOOLSET = {"type": "agent_toolset_20260401"}


def test_agent_lifecycle(server: ServerProcess) -> None:
    client = server.client()
    agent = client.beta.agents.create(
        model="claude-opus-4-7",
        name="smoke",
        system="Be brief.",
        tools=[
            {
                "type": "agent_toolset_20260401",
                "default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}},
                "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
            },
            LOOKUP,
        ],  # type: ignore[list-item]
        metadata={"suite": "smoke"},
    )
    assert agent.version == 1
    assert agent.model.id == "claude-opus-4-7"
    toolset = agent.tools[0]
    assert toolset.type == "agent_toolset_20260401"
    bash = next(c for c in toolset.configs if c.name == "bash")
    assert bash.permission_policy.type == "always_ask"
    assert client.beta.agents.retrieve(agent.id).version == 1
    v2 = client.beta.agents.update(agent.id, version=1, system="Be terse.")
    assert v2.version == 2 and v2.system == "Be terse."
    assert v2.metadata == {"suite": "smoke"}
    assert client.beta.agents.retrieve(agent.id, version=1).system == "Be brief."
    with pytest.raises(anthropic.ConflictError):
        client.beta.agents.update(agent.id, version=1, name="x")
    assert client.beta.agents.retrieve(agent.id).name == "smoke"
    versions = list(client.beta.agents.versions.list(agent.id, limit=1))
    assert [v.version for v in versions] == [1, 2]
    archived = client.beta.agents.archive(agent.id)
    assert archived.archived_at is not None
    ids = [a.id for a in client.beta.agents.list()]
    assert agent.id not in ids
    assert agent.id in [a.id for a in client.beta.agents.list(include_archived=True)]


def test_agent_pagination_walks_every_page(server: ServerProcess) -> None:
    client = server.client()
    made = {client.beta.agents.create(model="claude-haiku-4-5", name=f"p{i}").id for i in range(5)}
    seen = [a.id for a in client.beta.agents.list(limit=2)]
    assert made <= set(seen)
    assert len(seen) == len(set(seen))


def test_agent_metadata_patch_and_clearing(server: ServerProcess) -> None:
    client = server.client()
    agent = client.beta.agents.create(
        model="claude-haiku-4-5", name="m", metadata={"a": "1", "b": "2"}, system="s"
    )
    updated = client.beta.agents.update(agent.id, metadata={"a": None, "c": "3"}, system="")
    assert updated.metadata == {"b": "2", "c": "3"}
    assert updated.system is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x"}, "model"),
        ({"model": "m"}, "name"),
        (
            {
                "model": "m",
                "name": "x",
                "tools": [
                    {
                        "type": "custom",
                        "name": "bad name",
                        "description": "d",
                        "input_schema": {"type": "object"},
                    }
                ],
            },
            "tools",
        ),
        ({"model": "m", "name": "x", "tools": [{"type": "nope"}]}, "tools"),
        ({"model": "m", "name": "x", "metadata": {"k": 5}}, "metadata"),
        ({"model": "m", "name": "x", "surprise": 1}, "surprise"),
        ({"model": "m", "name": "x", "tools": [TOOLSET, TOOLSET]}, "tools"),
        (
            {
                "model": "m",
                "name": "x",
                "tools": [
                    {
                        "type": "agent_toolset_20260401",
                        "configs": [{"name": "web_search", "enabled": True}],
                    }
                ],
            },
            "web_search",
        ),
        ({"model": "gpt-unknown", "name": "x"}, "model"),
    ],
)
def test_agent_create_rejects_bad_bodies(
    server: ServerProcess, body: dict[str, object], field: str
) -> None:
    client = server.client()
    with pytest.raises(anthropic.BadRequestError) as info:
        client.post("/v1/agents", body=body, cast_to=httpx.Response)
    assert field in info.value.message


def test_unknown_ids_are_not_found(server: ServerProcess) -> None:
    client = server.client()
    with pytest.raises(anthropic.NotFoundError) as info:
        client.beta.agents.retrieve("agent_missing")
    assert info.value.type == "not_found_error"  # type: ignore[attr-defined]
    with pytest.raises(anthropic.NotFoundError):
        client.beta.environments.retrieve("env_missing")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.sessions.retrieve("sesn_missing")


def test_missing_or_wrong_key_is_authentication_error(server: ServerProcess) -> None:
    bad = anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.beta.agents.list()
    raw = httpx.get(f"{server.url}/v1/agents")
    assert raw.status_code == 401
    assert raw.json()["error"]["type"] == "authentication_error"
    ok = httpx.get(f"{server.url}/v1/agents", headers={"x-api-key": "test-key"})
    assert ok.status_code == 200
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_environment_lifecycle(server: ServerProcess) -> None:
    client = server.client()
    env = client.beta.environments.create(
        name="cloud-env", config={"type": "cloud", "networking": {"type": "unrestricted"}}
    )
    assert env.config.type == "cloud"
    limited = client.beta.environments.create(
        name="limited",
        config={
            "type": "cloud",
            "networking": {"type": "limited", "allowed_hosts": ["api.example.com"]},
        },
    )
    assert limited.config.networking.type == "limited"  # type: ignore[union-attr]
    updated = client.beta.environments.update(env.id, description="d", metadata={"k": "v"})
    assert updated.description == "d" and updated.metadata == {"k": "v"}
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.environments.update(env.id, config={"type": "self_hosted"})
    assert info.value.body["error"]["details"]["error_code"] == "invalid_config_type_change"  # type: ignore[index]
    assert client.beta.environments.archive(env.id).archived_at is not None
    assert client.beta.environments.delete(env.id).type == "environment_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.beta.environments.retrieve(env.id)
    with pytest.raises(anthropic.BadRequestError):
        client.beta.environments.create(
            name="bad",
            config={  # type: ignore[typeddict-item]
                "type": "cloud",
                "networking": {"type": "limited"},
                "packages": {"pip": ["x"]},
            },
        )
