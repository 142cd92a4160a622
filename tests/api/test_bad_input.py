"""Bad input to agents, environments, sessions and events, through the official SDK.

Each case names the exception class the SDK raises and the field the error message must name;
a refused request must leave stored data unchanged.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.api.bad_input_support import (
    MESSAGE,
    MODEL,
    TEXT,
    Ids,
    agent_body,
    custom,
    post,
    refused,
)
from tests.api.helpers import LOOKUP, events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, ToolUse, Turn

# ---- agents -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        pytest.param(agent_body(name=""), ["name"], id="empty-name"),
        pytest.param(agent_body(name="n" * 257), ["name"], id="name-too-long"),
        pytest.param({"name": "a"}, ["model"], id="model-missing"),
        pytest.param(agent_body(model=""), ["model"], id="model-empty"),
        pytest.param(agent_body(model={"id": MODEL, "effort": "extreme"}), ["effort"], id="effort"),
        pytest.param(agent_body(model="gpt-nope"), ["model"], id="model-unroutable"),
        pytest.param(
            agent_body(tools=[custom(schema={"type": "array"})]),
            ["input_schema"],
            id="schema-not-object",
        ),
        pytest.param(
            agent_body(tools=[custom(schema={"type": "object", "required": "key"})]),
            ["input_schema"],
            id="schema-required-not-list",
        ),
        pytest.param(
            agent_body(tools=[custom(), custom()]), ["tools", "lookup"], id="duplicate-custom-tools"
        ),
        pytest.param(
            agent_body(tools=[{"type": "agent_toolset_20260401"}, custom("bash")]),
            ["tools", "bash"],
            id="custom-tool-shadows-builtin",
        ),
        pytest.param(
            agent_body(
                mcp_servers=[{"type": "url", "name": "docs", "url": "https://mcp.example.com"}]
            ),
            ["mcp_servers", "docs"],
            id="mcp-server-not-referenced",
        ),
        pytest.param(
            agent_body(tools=[{"type": "mcp_toolset", "mcp_server_name": "ghost"}]),
            ["tools", "ghost"],
            id="toolset-references-unknown-server",
        ),
        pytest.param(
            agent_body(metadata={f"k{i}": "v" for i in range(17)}),
            ["metadata"],
            id="metadata-17-pairs",
        ),
        pytest.param(
            agent_body(metadata={"k" * 65: "v"}), ["metadata"], id="metadata-key-too-long"
        ),
        pytest.param(agent_body(metadata={"k": "v" * 513}), ["metadata"], id="metadata-value-long"),
        pytest.param(agent_body(tools="lookup"), ["tools"], id="tools-not-a-list"),
        pytest.param(
            agent_body(execution_identity={"type": "aws_role"}),
            ["role_arn"],
            id="aws-role-without-arn",
        ),
    ],
)
def test_agent_create_refuses(
    client: anthropic.Anthropic, body: dict[str, Any], fields: list[str]
) -> None:
    refused(anthropic.BadRequestError, post(client, "/v1/agents", body), *fields)


def test_agent_retrieve_with_version_zero(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.agents.retrieve(ids.agent, version=0),
        "version",
    )
    refused(
        anthropic.NotFoundError,
        lambda: client.beta.agents.retrieve(ids.agent, version=99),
        ids.agent,
    )


def test_agent_retrieve_with_a_version_past_64_bits(client: anthropic.Anthropic, ids: Ids) -> None:
    with pytest.raises((anthropic.BadRequestError, anthropic.NotFoundError)):
        client.beta.agents.retrieve(ids.agent, version=2**63)


def test_stale_version_update_conflicts_and_changes_nothing(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(model=MODEL, name="v", system="one")
    client.beta.agents.update(agent.id, version=1, system="two")
    error = refused(
        anthropic.ConflictError,
        lambda: client.beta.agents.update(agent.id, version=1, system="three"),
        "version",
    )
    assert error.response.headers.get("x-should-retry") == "false"
    latest = client.beta.agents.retrieve(agent.id)
    assert (latest.version, latest.system) == (2, "two")


def test_refused_agent_update_changes_nothing(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(model=MODEL, name="keep", tools=[LOOKUP])  # type: ignore[list-item]
    refused(
        anthropic.BadRequestError,
        post(client, f"/v1/agents/{agent.id}", {"name": "changed", "tools": [custom(), custom()]}),
        "tools",
    )
    refused(
        anthropic.BadRequestError,
        post(client, f"/v1/agents/{agent.id}", {"name": "changed", "version": 0}),
        "version",
    )
    assert client.beta.agents.retrieve(agent.id).model_dump() == agent.model_dump()


def test_updating_an_archived_agent(client: anthropic.Anthropic, ids: Ids) -> None:
    error = refused(
        anthropic.BadRequestError,
        lambda: client.beta.agents.update(ids.archived_agent, name="back"),
        ids.archived_agent,
        "archived",
    )
    assert error.error_code == "agent_archived"


def test_agent_writes_on_unknown_ids(client: anthropic.Anthropic) -> None:
    refused(
        anthropic.NotFoundError,
        lambda: client.beta.agents.update("agent_nope", name="x"),
        "agent_nope",
    )
    refused(anthropic.NotFoundError, lambda: client.beta.agents.archive("agent_nope"), "agent_nope")


# ---- environments -----------------------------------------------------------------------------


def cloud(**fields: Any) -> dict[str, Any]:
    """An environment create body with a cloud config of `fields`."""
    return {"name": "e", "config": {"type": "cloud", **fields}}


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        pytest.param({"name": ""}, ["name"], id="empty-name"),
        pytest.param(cloud(networking={"type": "open"}), ["networking"], id="networking-type"),
        pytest.param(
            cloud(networking={"type": "limited", "allowed_hosts": ["not a host!"]}),
            ["allowed_hosts"],
            id="allowed-host-with-spaces",
        ),
        pytest.param(
            cloud(networking={"type": "limited", "allowed_hosts": ["https://a.example"]}),
            ["allowed_hosts"],
            id="allowed-host-is-a-url",
        ),
        pytest.param(
            cloud(
                networking={"type": "limited", "allow_package_managers": False},
                packages={"pip": ["requests"]},
            ),
            ["allow_package_managers"],
            id="packages-without-package-managers",
        ),
        pytest.param(cloud(packages={"pip": ["requests; rm -rf /"]}), ["pip"], id="package-name"),
        pytest.param(
            {
                "name": "e",
                "config": {"type": "self_hosted", "networking": {"type": "unrestricted"}},
            },
            ["networking"],
            id="self-hosted-with-networking",
        ),
        pytest.param({"name": "e", "config": {"type": "docker"}}, ["config"], id="config-type"),
        pytest.param({"name": "e", "scope": "galaxy"}, ["scope"], id="scope"),
    ],
)
def test_environment_create_refuses(
    client: anthropic.Anthropic, body: dict[str, Any], fields: list[str]
) -> None:
    refused(anthropic.BadRequestError, post(client, "/v1/environments", body), *fields)


def test_environment_config_type_cannot_change(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name="typed", config={"type": "cloud"})
    error = refused(
        anthropic.BadRequestError,
        lambda: client.beta.environments.update(
            env.id, name="renamed", config={"type": "self_hosted"}
        ),
        "config.type",
    )
    assert error.error_code == "invalid_config_type_change"
    assert client.beta.environments.retrieve(env.id).model_dump() == env.model_dump()


def test_environment_metadata_patch_past_16_pairs(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name="m", metadata={f"k{i}": "v" for i in range(16)})
    error = refused(
        anthropic.BadRequestError,
        lambda: client.beta.environments.update(env.id, metadata={"one-more": "v"}),
        "metadata",
    )
    assert error.error_code == "invalid_metadata"
    assert client.beta.environments.retrieve(env.id).metadata == env.metadata


def test_environment_writes_on_unknown_ids(client: anthropic.Anthropic) -> None:
    for call in (
        lambda: client.beta.environments.update("env_nope", name="x"),
        lambda: client.beta.environments.delete("env_nope"),
        lambda: client.beta.environments.archive("env_nope"),
    ):
        error = refused(anthropic.NotFoundError, call, "env_nope")
        assert error.error_code == "environment_not_found"


def test_an_id_that_is_a_slash_is_not_found_not_redirected(client: anthropic.Anthropic) -> None:
    """`/v1/environments/%2F` must not be redirected to `/v1/environments`: the SDK follows the
    307 and the update body becomes a create."""
    before = {e.id for e in client.beta.environments.list(limit=100, include_archived=True)}
    refused(anthropic.NotFoundError, lambda: client.beta.environments.update("/", name="made?"))
    after = {e.id for e in client.beta.environments.list(limit=100, include_archived=True)}
    assert after == before


# ---- sessions ---------------------------------------------------------------------------------


def test_session_create_with_unknown_agent_or_environment(
    client: anthropic.Anthropic, ids: Ids
) -> None:
    refused(
        anthropic.NotFoundError,
        lambda: client.beta.sessions.create(agent="agent_nope", environment_id=ids.env),
        "agent_nope",
    )
    error = refused(
        anthropic.NotFoundError,
        lambda: client.beta.sessions.create(agent=ids.agent, environment_id="env_nope"),
        "env_nope",
    )
    assert error.error_code == "environment_not_found"


def test_session_create_on_archived_environment_or_agent(
    client: anthropic.Anthropic, ids: Ids
) -> None:
    error = refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.create(agent=ids.agent, environment_id=ids.archived_env),
        ids.archived_env,
        "archived",
    )
    assert error.error_code == "environment_archived"
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.create(agent=ids.archived_agent, environment_id=ids.env),
        ids.archived_agent,
        "archived",
    )


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        pytest.param(
            {"resources": [{"type": "github_repository", "url": "ssh://github.com/o/r"}]},
            ["resources[0].url", "https"],
            id="github-resource",
        ),
        pytest.param(
            {"resources": [{"type": "file", "file_id": "file_1"}]},
            ["resources"],
            id="file-resource",
        ),
        pytest.param(
            {"resources": [{"type": "disk", "size": 1}]}, ["resources"], id="resource-type"
        ),
        pytest.param({"vault_ids": ["vlt_1"]}, ["vault_ids"], id="vault-ids"),
        pytest.param({"budget": {"type": "limit"}}, ["budget"], id="budget"),
        pytest.param(
            {"initial_events": [{"type": "user.interrupt"}]},
            ["initial_events"],
            id="initial-interrupt",
        ),
        pytest.param(
            {"initial_events": [{"type": "agent.message", "content": TEXT}]},
            ["initial_events"],
            id="initial-agent-message",
        ),
        pytest.param(
            {"initial_events": [MESSAGE] * 51}, ["initial_events"], id="51-initial-events"
        ),
        pytest.param({"metadata": {"k": 1}}, ["metadata"], id="metadata-value-not-string"),
        pytest.param({"title": ["t"]}, ["title"], id="title-not-string"),
    ],
)
def test_session_create_refuses(
    client: anthropic.Anthropic, ids: Ids, fields: dict[str, Any], named: list[str]
) -> None:
    body = {"agent": ids.agent, "environment_id": ids.env, **fields}
    refused(anthropic.BadRequestError, post(client, "/v1/sessions", body), *named)


@pytest.mark.parametrize(
    ("agent", "named"),
    [
        pytest.param("", ["agent"], id="empty-string"),
        pytest.param(5, ["agent"], id="number"),
        pytest.param(["agent_x"], ["agent"], id="list"),
        pytest.param({"type": "agent"}, ["agent", "id"], id="object-without-id"),
        pytest.param({"type": "inline", "id": "@"}, ["agent"], id="unknown-form"),
        pytest.param({"type": "agent", "id": "@", "version": 0}, ["version"], id="version-zero"),
        pytest.param(
            {"type": "agent_with_overrides", "id": "@", "tools": [custom(), custom()]},
            ["tools"],
            id="overrides-duplicate-tools",
        ),
        pytest.param(
            {
                "type": "agent_with_overrides",
                "id": "@",
                "mcp_servers": [{"type": "url", "name": "docs", "url": "https://mcp.example.com"}],
            },
            ["tools"],
            id="overrides-mcp-without-tools",
        ),
        pytest.param(
            {"type": "agent_with_overrides", "id": "@", "name": "x"},
            ["name"],
            id="overrides-name-not-overridable",
        ),
    ],
)
def test_bad_agent_reference_forms(
    client: anthropic.Anthropic, ids: Ids, agent: Any, named: list[str]
) -> None:
    if isinstance(agent, dict) and agent.get("id") == "@":
        agent = {**agent, "id": ids.agent}
    body = {"agent": agent, "environment_id": ids.env}
    refused(anthropic.BadRequestError, post(client, "/v1/sessions", body), *named)


def test_agent_reference_to_missing_or_huge_version(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(
        anthropic.NotFoundError,
        lambda: client.beta.sessions.create(
            agent={"type": "agent", "id": ids.agent, "version": 99}, environment_id=ids.env
        ),
        ids.agent,
    )
    with pytest.raises((anthropic.BadRequestError, anthropic.NotFoundError)):
        client.beta.sessions.create(
            agent={"type": "agent", "id": ids.agent, "version": 2**63}, environment_id=ids.env
        )


def test_refused_session_create_makes_no_session(client: anthropic.Anthropic, ids: Ids) -> None:
    agent = client.beta.agents.create(model=MODEL, name="lonely")
    refused(
        anthropic.BadRequestError,
        post(
            client,
            "/v1/sessions",
            {
                "agent": agent.id,
                "environment_id": ids.env,
                "initial_events": [
                    MESSAGE,
                    {
                        "type": "user.define_outcome",
                        "description": "d",
                        "rubric": {"type": "text", "content": "r"},
                    },
                ],
            },
        ),
        "initial_events",
    )
    assert list(client.beta.sessions.list(agent_id=agent.id, include_archived=True)) == []


@pytest.mark.parametrize(
    ("body", "named"),
    [
        pytest.param({"vault_ids": []}, ["vault_ids"], id="vault-ids"),
        pytest.param({"budget": None}, ["budget"], id="budget"),
        pytest.param({"metadata": {f"k{i}": "v" for i in range(17)}}, ["metadata"], id="metadata"),
        pytest.param({"agent": {"model": MODEL}}, ["agent"], id="agent-model"),
        pytest.param({"agent": {"mcp_servers": []}}, ["agent.tools"], id="agent-without-tools"),
        pytest.param({"status": "idle"}, ["status"], id="unknown-field"),
    ],
)
def test_session_update_refuses_and_changes_nothing(
    client: anthropic.Anthropic, ids: Ids, body: dict[str, Any], named: list[str]
) -> None:
    before = client.beta.sessions.retrieve(ids.session)
    refused(
        anthropic.BadRequestError,
        post(client, f"/v1/sessions/{ids.session}", {"title": "changed", **body}),
        *named,
    )
    after = client.beta.sessions.retrieve(ids.session)
    assert (after.title, after.metadata, after.agent) == (
        before.title,
        before.metadata,
        before.agent,
    )
    assert [e.type for e in events(client, ids.session)] == []


def test_session_writes_on_deleted_or_unknown_sessions(
    client: anthropic.Anthropic, ids: Ids
) -> None:
    for session_id in (ids.deleted_session, "sesn_nope"):
        for call in (
            lambda s=session_id: client.beta.sessions.update(s, title="x"),
            lambda s=session_id: client.beta.sessions.archive(s),
            lambda s=session_id: client.beta.sessions.delete(s),
            lambda s=session_id: say(client, s, "hi"),
        ):
            refused(anthropic.NotFoundError, call, session_id)


# ---- events -----------------------------------------------------------------------------------


def confirmation(**fields: Any) -> dict[str, Any]:
    """A user.tool_confirmation for an unknown tool use, with `fields` changed."""
    return {
        "type": "user.tool_confirmation",
        "tool_use_id": "sevt_nope",
        "result": "allow",
        **fields,
    }


@pytest.mark.parametrize(
    ("sent", "named"),
    [
        pytest.param([], ["events"], id="empty-list"),
        pytest.param(MESSAGE, ["events"], id="not-a-list"),
        pytest.param([MESSAGE] * 101, ["events"], id="101-events"),
        pytest.param([{"content": TEXT}], ["events[0]", "type"], id="type-missing"),
        pytest.param([{"type": "user.nope"}], ["events[0]", "user.nope"], id="unknown-type"),
        pytest.param(
            [{"type": "agent.message", "content": TEXT}],
            ["events[0]", "agent.message"],
            id="server-only-type",
        ),
        pytest.param([{"type": "user.message", "content": []}], ["content"], id="empty-content"),
        pytest.param([{"type": "user.message"}], ["content"], id="content-missing"),
        pytest.param([{"type": "user.message", "content": "hi"}], ["content"], id="content-string"),
        pytest.param(
            [{"type": "user.message", "content": [{"type": "text"}]}],
            ["text"],
            id="text-block-without-text",
        ),
        pytest.param(
            [
                {
                    "type": "system.message",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "https://x.example/a.png"},
                        }
                    ],
                }
            ],
            ["content"],
            id="system-message-image",
        ),
        pytest.param(
            [{"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nope"}],
            ["custom_tool_use_id", "sevt_nope"],
            id="unknown-custom-tool-use",
        ),
        pytest.param([confirmation()], ["tool_use_id", "sevt_nope"], id="unknown-tool-use"),
        pytest.param(
            [confirmation(deny_message="no")], ["deny_message"], id="deny-message-with-allow"
        ),
        pytest.param([confirmation(result="maybe")], ["result"], id="result-not-allow-or-deny"),
        pytest.param(
            [{"type": "user.tool_result", "tool_use_id": "sevt_nope"}],
            ["events[0]", "user.tool_result"],
            id="tool-result-on-cloud",
        ),
        pytest.param(
            [
                {
                    "type": "user.define_outcome",
                    "description": "d",
                    "rubric": {"type": "text", "content": "r"},
                }
            ],
            ["user.define_outcome"],
            id="define-outcome",
        ),
        pytest.param(
            [{"type": "user.interrupt", "session_thread_id": 5}],
            ["session_thread_id"],
            id="thread-id-not-string",
        ),
        pytest.param(
            [MESSAGE, {"type": "user.custom_tool_result", "custom_tool_use_id": "x"}],
            ["events[1]", "custom_tool_use_id"],
            id="second-event-bad",
        ),
    ],
)
def test_event_send_refuses_and_appends_nothing(
    client: anthropic.Anthropic, ids: Ids, sent: Any, named: list[str]
) -> None:
    refused(
        anthropic.BadRequestError,
        post(client, f"/v1/sessions/{ids.session}/events", {"events": sent}),
        *named,
    )
    assert events(client, ids.session) == []


def test_confirming_a_tool_use_that_does_not_ask(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset([Turn([ToolUse("lookup", {"key": "a"})]), Turn([Text("ok")])])
    session_id, _ = make_session(client)
    say(client, session_id, "look it up")
    wait_idle(client, session_id, stop="requires_action")
    use = next(e for e in events(client, session_id) if e.type == "agent.custom_tool_use")
    before = len(events(client, session_id))
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.events.send(
            session_id,
            events=[{"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"}],
        ),
        "tool_use_id",
    )
    assert len(events(client, session_id)) == before
    fake_model.reset(ScriptedTurns([Turn([Text("hello")])], repeat_last=True))


def test_events_on_an_archived_session(client: anthropic.Anthropic, ids: Ids) -> None:
    error = refused(
        anthropic.BadRequestError,
        lambda: say(client, ids.archived_session, "hi"),
        ids.archived_session,
        "archived",
    )
    assert error.error_code == "session_archived"
