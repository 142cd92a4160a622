"""Bad input through the official SDK: each case names the exception class the SDK raises and
the field the error message must name. A refused request must leave stored data unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest

from tests.api.helpers import LOOKUP, events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, ToolUse, Turn
from tests.server import ServerProcess

MODEL = "claude-sonnet-4-5"
TEXT = [{"type": "text", "text": "hi"}]
MESSAGE = {"type": "user.message", "content": TEXT}
Refusal = type[anthropic.APIStatusError]


@dataclass(frozen=True, slots=True, kw_only=True)
class Ids:
    """Objects the cases refer to, made once per module."""

    agent: str
    archived_agent: str
    env: str
    archived_env: str
    session: str
    deleted_session: str
    archived_session: str


@pytest.fixture
def client(server: ServerProcess) -> anthropic.Anthropic:
    """The SDK against the module's server; a new connection per test, because the server
    drops the connection after a 500 and the next request on it would fail too."""
    return server.client()


@pytest.fixture(scope="module")
def ids(server: ServerProcess, fake_model: FakeModelServer) -> Iterator[Ids]:
    """An agent, environments and sessions in the states the cases need."""
    fake_model.reset(ScriptedTurns([Turn([Text("hello")])], repeat_last=True))
    client = server.client()
    agent = client.beta.agents.create(model=MODEL, name="bad-input", tools=[LOOKUP])  # type: ignore[list-item]
    archived_agent = client.beta.agents.create(model=MODEL, name="old")
    client.beta.agents.archive(archived_agent.id)
    env = client.beta.environments.create(name="bad-input")
    archived_env = client.beta.environments.create(name="old")
    client.beta.environments.archive(archived_env.id)
    made = [client.beta.sessions.create(agent=agent.id, environment_id=env.id).id
            for _ in range(3)]
    client.beta.sessions.delete(made[1])
    client.beta.sessions.archive(made[2])
    yield Ids(agent=agent.id, archived_agent=archived_agent.id, env=env.id,
              archived_env=archived_env.id, session=made[0], deleted_session=made[1],
              archived_session=made[2])


def refused(kind: Refusal, call: Callable[[], object], *fields: str) -> anthropic.APIStatusError:
    """`call` raises `kind` with an error envelope whose message names every one of `fields`."""
    with pytest.raises(kind) as info:
        call()
    error = info.value
    assert error.body["type"] == "error", error.body  # type: ignore[index]
    message = error.api_message  # type: ignore[attr-defined]
    assert isinstance(message, str) and message.strip(), error.body
    for field in fields:
        assert field in message, f"{field!r} not named in {message!r}"
    return error


def post(client: anthropic.Anthropic, path: str, body: object = None,
         content: bytes | None = None) -> Callable[[], object]:
    """A raw POST the SDK's typed signatures would not let through."""
    if content is not None:
        return lambda: client.post(path, content=content, cast_to=str,
                                   options={"headers": {"content-type": "application/json"}})
    return lambda: client.post(path, body=body, cast_to=str)


def get(client: anthropic.Anthropic, path: str, **params: Any) -> Callable[[], object]:
    """A raw GET with query parameters as given."""
    return lambda: client.get(path, cast_to=str, options={"params": params})


def agent_body(**fields: Any) -> dict[str, Any]:
    """A valid agent create body with `fields` changed."""
    return {"name": "a", "model": MODEL, **fields}


def custom(name: str = "lookup", schema: Any = None) -> dict[str, Any]:
    """A custom tool definition."""
    return {"type": "custom", "name": name, "description": "d",
            "input_schema": schema if schema is not None else {"type": "object"}}


# ---- agents -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "fields"), [
    pytest.param(agent_body(name=""), ["name"], id="empty-name"),
    pytest.param(agent_body(name="n" * 257), ["name"], id="name-too-long"),
    pytest.param({"name": "a"}, ["model"], id="model-missing"),
    pytest.param(agent_body(model=""), ["model"], id="model-empty"),
    pytest.param(agent_body(model={"id": MODEL, "effort": "extreme"}), ["effort"], id="effort"),
    pytest.param(agent_body(model="gpt-nope"), ["model"], id="model-unroutable"),
    pytest.param(agent_body(tools=[custom(schema={"type": "array"})]), ["input_schema"],
                 id="schema-not-object"),
    pytest.param(agent_body(tools=[custom(schema={"type": "object", "required": "key"})]),
                 ["input_schema"], id="schema-required-not-list"),
    pytest.param(agent_body(tools=[custom(), custom()]), ["tools", "lookup"],
                 id="duplicate-custom-tools"),
    pytest.param(agent_body(tools=[{"type": "agent_toolset_20260401"}, custom("bash")]),
                 ["tools", "bash"], id="custom-tool-shadows-builtin"),
    pytest.param(agent_body(mcp_servers=[{"type": "url", "name": "docs",
                                          "url": "https://mcp.example.com"}]),
                 ["mcp_servers", "docs"], id="mcp-server-not-referenced"),
    pytest.param(agent_body(tools=[{"type": "mcp_toolset", "mcp_server_name": "ghost"}]),
                 ["tools", "ghost"], id="toolset-references-unknown-server"),
    pytest.param(agent_body(metadata={f"k{i}": "v" for i in range(17)}), ["metadata"],
                 id="metadata-17-pairs"),
    pytest.param(agent_body(metadata={"k" * 65: "v"}), ["metadata"], id="metadata-key-too-long"),
    pytest.param(agent_body(metadata={"k": "v" * 513}), ["metadata"], id="metadata-value-long"),
    pytest.param(agent_body(tools="lookup"), ["tools"], id="tools-not-a-list"),
    pytest.param(agent_body(execution_identity={"type": "aws_role"}), ["role_arn"],
                 id="aws-role-without-arn"),
])
def test_agent_create_refuses(client: anthropic.Anthropic, body: dict[str, Any],
                              fields: list[str]) -> None:
    refused(anthropic.BadRequestError, post(client, "/v1/agents", body), *fields)


def test_agent_retrieve_with_version_zero(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(anthropic.BadRequestError, lambda: client.beta.agents.retrieve(ids.agent, version=0),
            "version")
    refused(anthropic.NotFoundError, lambda: client.beta.agents.retrieve(ids.agent, version=99),
            ids.agent)


def test_agent_retrieve_with_a_version_past_64_bits(client: anthropic.Anthropic,
                                                    ids: Ids) -> None:
    with pytest.raises((anthropic.BadRequestError, anthropic.NotFoundError)):
        client.beta.agents.retrieve(ids.agent, version=2**63)


def test_stale_version_update_conflicts_and_changes_nothing(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(model=MODEL, name="v", system="one")
    client.beta.agents.update(agent.id, version=1, system="two")
    error = refused(anthropic.ConflictError,
                    lambda: client.beta.agents.update(agent.id, version=1, system="three"),
                    "version")
    assert error.response.headers.get("x-should-retry") == "false"
    latest = client.beta.agents.retrieve(agent.id)
    assert (latest.version, latest.system) == (2, "two")


def test_refused_agent_update_changes_nothing(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(model=MODEL, name="keep", tools=[LOOKUP])  # type: ignore[list-item]
    refused(anthropic.BadRequestError, post(client, f"/v1/agents/{agent.id}", {
        "name": "changed", "tools": [custom(), custom()]}), "tools")
    refused(anthropic.BadRequestError, post(client, f"/v1/agents/{agent.id}", {
        "name": "changed", "version": 0}), "version")
    assert client.beta.agents.retrieve(agent.id).model_dump() == agent.model_dump()


def test_updating_an_archived_agent(client: anthropic.Anthropic, ids: Ids) -> None:
    error = refused(anthropic.BadRequestError,
                    lambda: client.beta.agents.update(ids.archived_agent, name="back"),
                    ids.archived_agent, "archived")
    assert error.error_code == "agent_archived"  # type: ignore[attr-defined]


def test_agent_writes_on_unknown_ids(client: anthropic.Anthropic) -> None:
    refused(anthropic.NotFoundError, lambda: client.beta.agents.update("agent_nope", name="x"),
            "agent_nope")
    refused(anthropic.NotFoundError, lambda: client.beta.agents.archive("agent_nope"),
            "agent_nope")


# ---- environments -----------------------------------------------------------------------------

def cloud(**fields: Any) -> dict[str, Any]:
    """An environment create body with a cloud config of `fields`."""
    return {"name": "e", "config": {"type": "cloud", **fields}}


@pytest.mark.parametrize(("body", "fields"), [
    pytest.param({"name": ""}, ["name"], id="empty-name"),
    pytest.param(cloud(networking={"type": "open"}), ["networking"], id="networking-type"),
    pytest.param(cloud(networking={"type": "limited", "allowed_hosts": ["not a host!"]}),
                 ["allowed_hosts"], id="allowed-host-with-spaces"),
    pytest.param(cloud(networking={"type": "limited", "allowed_hosts": ["https://a.example"]}),
                 ["allowed_hosts"], id="allowed-host-is-a-url"),
    pytest.param(cloud(networking={"type": "limited", "allow_package_managers": False},
                       packages={"pip": ["requests"]}), ["allow_package_managers"],
                 id="packages-without-package-managers"),
    pytest.param(cloud(packages={"pip": ["requests; rm -rf /"]}), ["pip"], id="package-name"),
    pytest.param({"name": "e", "config": {"type": "self_hosted", "networking": {
        "type": "unrestricted"}}}, ["networking"], id="self-hosted-with-networking"),
    pytest.param({"name": "e", "config": {"type": "docker"}}, ["config"], id="config-type"),
    pytest.param({"name": "e", "scope": "galaxy"}, ["scope"], id="scope"),
])
def test_environment_create_refuses(client: anthropic.Anthropic, body: dict[str, Any],
                                    fields: list[str]) -> None:
    refused(anthropic.BadRequestError, post(client, "/v1/environments", body), *fields)


def test_environment_config_type_cannot_change(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name="typed", config={"type": "cloud"})
    error = refused(anthropic.BadRequestError, lambda: client.beta.environments.update(
        env.id, name="renamed", config={"type": "self_hosted"}), "config.type")
    assert error.error_code == "invalid_config_type_change"  # type: ignore[attr-defined]
    assert client.beta.environments.retrieve(env.id).model_dump() == env.model_dump()


def test_environment_metadata_patch_past_16_pairs(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name="m", metadata={f"k{i}": "v" for i in range(16)})
    error = refused(anthropic.BadRequestError, lambda: client.beta.environments.update(
        env.id, metadata={"one-more": "v"}), "metadata")
    assert error.error_code == "invalid_metadata"  # type: ignore[attr-defined]
    assert client.beta.environments.retrieve(env.id).metadata == env.metadata


def test_environment_writes_on_unknown_ids(client: anthropic.Anthropic) -> None:
    for call in (lambda: client.beta.environments.update("env_nope", name="x"),
                 lambda: client.beta.environments.delete("env_nope"),
                 lambda: client.beta.environments.archive("env_nope")):
        error = refused(anthropic.NotFoundError, call, "env_nope")
        assert error.error_code == "environment_not_found"  # type: ignore[attr-defined]


def test_an_id_that_is_a_slash_is_not_found_not_redirected(client: anthropic.Anthropic) -> None:
    """`/v1/environments/%2F` must not be redirected to `/v1/environments`: the SDK follows the
    307 and the update body becomes a create."""
    before = {e.id for e in client.beta.environments.list(limit=100, include_archived=True)}
    refused(anthropic.NotFoundError, lambda: client.beta.environments.update("/", name="made?"))
    after = {e.id for e in client.beta.environments.list(limit=100, include_archived=True)}
    assert after == before


# ---- sessions ---------------------------------------------------------------------------------

def test_session_create_with_unknown_agent_or_environment(client: anthropic.Anthropic,
                                                          ids: Ids) -> None:
    refused(anthropic.NotFoundError, lambda: client.beta.sessions.create(
        agent="agent_nope", environment_id=ids.env), "agent_nope")
    error = refused(anthropic.NotFoundError, lambda: client.beta.sessions.create(
        agent=ids.agent, environment_id="env_nope"), "env_nope")
    assert error.error_code == "environment_not_found"  # type: ignore[attr-defined]


def test_session_create_on_archived_environment_or_agent(client: anthropic.Anthropic,
                                                         ids: Ids) -> None:
    error = refused(anthropic.BadRequestError, lambda: client.beta.sessions.create(
        agent=ids.agent, environment_id=ids.archived_env), ids.archived_env, "archived")
    assert error.error_code == "environment_archived"  # type: ignore[attr-defined]
    refused(anthropic.BadRequestError, lambda: client.beta.sessions.create(
        agent=ids.archived_agent, environment_id=ids.env), ids.archived_agent, "archived")


@pytest.mark.parametrize(("fields", "named"), [
    pytest.param({"resources": [{"type": "github_repository", "url": "https://github.com/o/r"}]},
                 ["resources", "github_repository"], id="github-resource"),
    pytest.param({"resources": [{"type": "file", "file_id": "file_1"}]}, ["resources"],
                 id="file-resource"),
    pytest.param({"resources": [{"type": "disk", "size": 1}]}, ["resources"], id="resource-type"),
    pytest.param({"vault_ids": ["vlt_1"]}, ["vault_ids"], id="vault-ids"),
    pytest.param({"budget": {"type": "limit"}}, ["budget"], id="budget"),
    pytest.param({"initial_events": [{"type": "user.interrupt"}]}, ["initial_events"],
                 id="initial-interrupt"),
    pytest.param({"initial_events": [{"type": "agent.message", "content": TEXT}]},
                 ["initial_events"], id="initial-agent-message"),
    pytest.param({"initial_events": [MESSAGE] * 51}, ["initial_events"], id="51-initial-events"),
    pytest.param({"metadata": {"k": 1}}, ["metadata"], id="metadata-value-not-string"),
    pytest.param({"title": ["t"]}, ["title"], id="title-not-string"),
])
def test_session_create_refuses(client: anthropic.Anthropic, ids: Ids, fields: dict[str, Any],
                                named: list[str]) -> None:
    body = {"agent": ids.agent, "environment_id": ids.env, **fields}
    refused(anthropic.BadRequestError, post(client, "/v1/sessions", body), *named)


@pytest.mark.parametrize(("agent", "named"), [
    pytest.param("", ["agent"], id="empty-string"),
    pytest.param(5, ["agent"], id="number"),
    pytest.param(["agent_x"], ["agent"], id="list"),
    pytest.param({"type": "agent"}, ["agent", "id"], id="object-without-id"),
    pytest.param({"type": "inline", "id": "@"}, ["agent"], id="unknown-form"),
    pytest.param({"type": "agent", "id": "@", "version": 0}, ["version"], id="version-zero"),
    pytest.param({"type": "agent_with_overrides", "id": "@", "tools": [custom(), custom()]},
                 ["tools"], id="overrides-duplicate-tools"),
    pytest.param({"type": "agent_with_overrides", "id": "@", "mcp_servers": [
        {"type": "url", "name": "docs", "url": "https://mcp.example.com"}]}, ["tools"],
                 id="overrides-mcp-without-tools"),
    pytest.param({"type": "agent_with_overrides", "id": "@", "name": "x"}, ["name"],
                 id="overrides-name-not-overridable"),
])
def test_bad_agent_reference_forms(client: anthropic.Anthropic, ids: Ids, agent: Any,
                                   named: list[str]) -> None:
    if isinstance(agent, dict) and agent.get("id") == "@":
        agent = {**agent, "id": ids.agent}
    body = {"agent": agent, "environment_id": ids.env}
    refused(anthropic.BadRequestError, post(client, "/v1/sessions", body), *named)


def test_agent_reference_to_missing_or_huge_version(client: anthropic.Anthropic,
                                                    ids: Ids) -> None:
    refused(anthropic.NotFoundError, lambda: client.beta.sessions.create(
        agent={"type": "agent", "id": ids.agent, "version": 99}, environment_id=ids.env),
            ids.agent)
    with pytest.raises((anthropic.BadRequestError, anthropic.NotFoundError)):
        client.beta.sessions.create(agent={"type": "agent", "id": ids.agent, "version": 2**63},
                                    environment_id=ids.env)


def test_refused_session_create_makes_no_session(client: anthropic.Anthropic, ids: Ids) -> None:
    agent = client.beta.agents.create(model=MODEL, name="lonely")
    refused(anthropic.BadRequestError, post(client, "/v1/sessions", {
        "agent": agent.id, "environment_id": ids.env,
        "initial_events": [MESSAGE, {"type": "user.define_outcome", "description": "d",
                                     "rubric": {"type": "text", "content": "r"}}]}),
            "initial_events")
    assert list(client.beta.sessions.list(agent_id=agent.id, include_archived=True)) == []


@pytest.mark.parametrize(("body", "named"), [
    pytest.param({"vault_ids": []}, ["vault_ids"], id="vault-ids"),
    pytest.param({"budget": None}, ["budget"], id="budget"),
    pytest.param({"metadata": {f"k{i}": "v" for i in range(17)}}, ["metadata"], id="metadata"),
    pytest.param({"agent": {"model": MODEL}}, ["agent"], id="agent-model"),
    pytest.param({"agent": {"mcp_servers": []}}, ["agent.tools"], id="agent-without-tools"),
    pytest.param({"status": "idle"}, ["status"], id="unknown-field"),
])
def test_session_update_refuses_and_changes_nothing(client: anthropic.Anthropic, ids: Ids,
                                                    body: dict[str, Any],
                                                    named: list[str]) -> None:
    before = client.beta.sessions.retrieve(ids.session)
    refused(anthropic.BadRequestError, post(client, f"/v1/sessions/{ids.session}", {
        "title": "changed", **body}), *named)
    after = client.beta.sessions.retrieve(ids.session)
    assert (after.title, after.metadata, after.agent) == (before.title, before.metadata,
                                                          before.agent)
    assert [e.type for e in events(client, ids.session)] == []


def test_session_writes_on_deleted_or_unknown_sessions(client: anthropic.Anthropic,
                                                       ids: Ids) -> None:
    for session_id in (ids.deleted_session, "sesn_nope"):
        for call in (lambda s=session_id: client.beta.sessions.update(s, title="x"),
                     lambda s=session_id: client.beta.sessions.archive(s),
                     lambda s=session_id: client.beta.sessions.delete(s),
                     lambda s=session_id: say(client, s, "hi")):
            refused(anthropic.NotFoundError, call, session_id)


# ---- events -----------------------------------------------------------------------------------

def confirmation(**fields: Any) -> dict[str, Any]:
    """A user.tool_confirmation for an unknown tool use, with `fields` changed."""
    return {"type": "user.tool_confirmation", "tool_use_id": "sevt_nope", "result": "allow",
            **fields}


@pytest.mark.parametrize(("sent", "named"), [
    pytest.param([], ["events"], id="empty-list"),
    pytest.param(MESSAGE, ["events"], id="not-a-list"),
    pytest.param([MESSAGE] * 101, ["events"], id="101-events"),
    pytest.param([{"content": TEXT}], ["events.0", "type"], id="type-missing"),
    pytest.param([{"type": "user.nope"}], ["events.0", "user.nope"], id="unknown-type"),
    pytest.param([{"type": "agent.message", "content": TEXT}], ["events.0", "agent.message"],
                 id="server-only-type"),
    pytest.param([{"type": "user.message", "content": []}], ["content"], id="empty-content"),
    pytest.param([{"type": "user.message"}], ["content"], id="content-missing"),
    pytest.param([{"type": "user.message", "content": "hi"}], ["content"], id="content-string"),
    pytest.param([{"type": "user.message", "content": [{"type": "text"}]}], ["text"],
                 id="text-block-without-text"),
    pytest.param([{"type": "system.message", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x.example/a.png"}}]}],
                 ["content"], id="system-message-image"),
    pytest.param([{"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_nope"}],
                 ["custom_tool_use_id", "sevt_nope"], id="unknown-custom-tool-use"),
    pytest.param([confirmation()], ["tool_use_id", "sevt_nope"], id="unknown-tool-use"),
    pytest.param([confirmation(deny_message="no")], ["deny_message"],
                 id="deny-message-with-allow"),
    pytest.param([confirmation(result="maybe")], ["result"], id="result-not-allow-or-deny"),
    pytest.param([{"type": "user.tool_result", "tool_use_id": "sevt_nope"}],
                 ["events[0]", "user.tool_result"], id="tool-result-on-cloud"),
    pytest.param([{"type": "user.define_outcome", "description": "d",
                   "rubric": {"type": "text", "content": "r"}}], ["user.define_outcome"],
                 id="define-outcome"),
    pytest.param([{"type": "user.interrupt", "session_thread_id": 5}], ["session_thread_id"],
                 id="thread-id-not-string"),
    pytest.param([MESSAGE, {"type": "user.custom_tool_result", "custom_tool_use_id": "x"}],
                 ["events[1]", "custom_tool_use_id"], id="second-event-bad"),
])
def test_event_send_refuses_and_appends_nothing(client: anthropic.Anthropic, ids: Ids,
                                                sent: Any, named: list[str]) -> None:
    refused(anthropic.BadRequestError,
            post(client, f"/v1/sessions/{ids.session}/events", {"events": sent}), *named)
    assert events(client, ids.session) == []


def test_confirming_a_tool_use_that_does_not_ask(client: anthropic.Anthropic,
                                                 fake_model: FakeModelServer) -> None:
    fake_model.reset([Turn([ToolUse("lookup", {"key": "a"})]), Turn([Text("ok")])])
    session_id, _ = make_session(client)
    say(client, session_id, "look it up")
    wait_idle(client, session_id, stop="requires_action")
    use = next(e for e in events(client, session_id) if e.type == "agent.custom_tool_use")
    before = len(events(client, session_id))
    refused(anthropic.BadRequestError, lambda: client.beta.sessions.events.send(
        session_id, events=[{"type": "user.tool_confirmation", "tool_use_id": use.id,
                             "result": "allow"}]), "tool_use_id")
    assert len(events(client, session_id)) == before


def test_events_on_an_archived_session(client: anthropic.Anthropic, ids: Ids) -> None:
    error = refused(anthropic.BadRequestError, lambda: say(client, ids.archived_session, "hi"),
                    ids.archived_session, "archived")
    assert error.error_code == "session_archived"  # type: ignore[attr-defined]


# ---- list and read parameters -----------------------------------------------------------------

LISTS = ["/v1/agents", "/v1/environments", "/v1/sessions", "/v1/sessions/@/events",
         "/v1/agents/@/versions"]


def listing(ids: Ids, path: str) -> str:
    """`path` with `@` replaced by the id it needs."""
    return path.replace("@", ids.session if "sessions" in path else ids.agent)


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize("limit", ["0", "10000", "abc", "-1", "1.5"])
def test_list_limit_out_of_range(client: anthropic.Anthropic, ids: Ids, path: str,
                                 limit: str) -> None:
    refused(anthropic.BadRequestError, get(client, listing(ids, path), limit=limit), "limit")


@pytest.mark.parametrize("path", LISTS)
def test_list_page_cursor_the_server_never_issued(client: anthropic.Anthropic, ids: Ids,
                                                  path: str) -> None:
    """A made-up cursor must not read as "the first page" or "no more pages"."""
    refused(anthropic.BadRequestError, get(client, listing(ids, path), page="garbage!"), "page")


@pytest.mark.parametrize(("path", "cursor"), [
    ("/v1/sessions/@/events", "page_c2VxOjk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5"),  # seq:999…9 (22)
    ("/v1/agents/@/versions", "9" * 25),
    ("/v1/agents/@/versions", "²"),  # str.isdigit() says yes, int() says no
])
def test_list_page_cursor_that_is_not_a_64_bit_number(client: anthropic.Anthropic, ids: Ids,
                                                      path: str, cursor: str) -> None:
    refused(anthropic.BadRequestError, get(client, listing(ids, path), page=cursor), "page")


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/@/events"])
def test_list_order_must_be_asc_or_desc(client: anthropic.Anthropic, ids: Ids,
                                        path: str) -> None:
    refused(anthropic.BadRequestError, get(client, listing(ids, path), order="sideways"), "order")


@pytest.mark.parametrize("path", ["/v1/agents", "/v1/environments", "/v1/sessions",
                                  "/v1/sessions/@/events"])
@pytest.mark.parametrize("moment", ["yesterday", "2024-13-01T00:00:00Z",
                                    "0001-01-01T00:00:00+01:00"])
def test_list_created_at_must_be_a_timestamp(client: anthropic.Anthropic, ids: Ids, path: str,
                                             moment: str) -> None:
    refused(anthropic.BadRequestError,
            get(client, listing(ids, path), **{"created_at[gte]": moment}), "created_at[gte]")


@pytest.mark.parametrize("path", ["/v1/agents", "/v1/environments", "/v1/sessions"])
def test_list_include_archived_must_be_boolean(client: anthropic.Anthropic, ids: Ids,
                                               path: str) -> None:
    refused(anthropic.BadRequestError, get(client, path, include_archived="maybe"),
            "include_archived")


def test_session_list_filters(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(anthropic.BadRequestError,
            lambda: client.beta.sessions.list(statuses=["idle", "sleeping"]),  # type: ignore[list-item]
            "statuses", "sleeping")
    refused(anthropic.BadRequestError, lambda: client.beta.sessions.list(agent_version=1),
            "agent_version")
    refused(anthropic.BadRequestError, get(client, "/v1/sessions", agent_id=ids.agent,
                                           agent_version="one"), "agent_version")
    refused(anthropic.BadRequestError, get(client, "/v1/sessions", agent_id=ids.agent,
                                           agent_version=str(2**63)), "agent_version")


def test_event_list_types_must_be_known(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(anthropic.BadRequestError, lambda: client.beta.sessions.events.list(
        ids.session, types=["agent.message", "agent.dream"]), "types", "agent.dream")  # type: ignore[list-item]


# ---- bodies that are not JSON objects, or hold what JSON cannot carry back -----------------------

@pytest.mark.parametrize("path", ["/v1/agents", "/v1/environments", "/v1/sessions",
                                  "/v1/sessions/@/events"])
@pytest.mark.parametrize("content", [
    pytest.param(b"[]", id="array"), pytest.param(b'"agent"', id="string"),
    pytest.param(b"42", id="number"), pytest.param(b"null", id="null"),
    pytest.param(b'{"name": ', id="truncated"), pytest.param(b"name=a", id="form-encoded"),
    pytest.param(b'{"name": "\xff\xfe"}', id="invalid-utf8"),
    pytest.param(b"\xef\xbb\xbf{}", id="utf8-bom"),
])
def test_bodies_that_are_not_json_objects(client: anthropic.Anthropic, ids: Ids, path: str,
                                          content: bytes) -> None:
    refused(anthropic.BadRequestError, post(client, listing(ids, path), content=content))


@pytest.mark.parametrize("path", ["/v1/agents", "/v1/sessions/@/events"])
@pytest.mark.parametrize("content", [
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested-100000"),
    pytest.param(b'{"name": "a", "metadata": ' + b'{"a": ' * 2000 + b"1" + b"}" * 2001,
                 id="nested-2000-in-a-field"),
])
def test_deeply_nested_json_is_refused(client: anthropic.Anthropic, ids: Ids, path: str,
                                       content: bytes) -> None:
    refused(anthropic.BadRequestError, post(client, listing(ids, path), content=content))


def test_body_over_the_size_limit_is_413(client: anthropic.Anthropic) -> None:
    body = b'{"name": "big", "model": "%s", "system": "' % MODEL.encode() + b"x" * (9 << 20) + b'"}'
    error = refused(anthropic.ContentTooLargeError, post(client, "/v1/agents", content=body))
    assert error.type == "request_too_large"  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_numbers_are_refused_not_stored(client: anthropic.Anthropic,
                                                   value: bytes) -> None:
    """Python's JSON reader takes NaN; a stored NaN can never be rendered again."""
    since = client.beta.agents.create(model=MODEL, name="clock").created_at
    body = b'{"name": "nan", "model": "%s", "multiagent": {"x": %s}}' % (MODEL.encode(), value)
    refused(anthropic.BadRequestError, post(client, "/v1/agents", content=body))
    assert [a.name for a in client.beta.agents.list(created_at_gte=since)] == ["clock"]


@pytest.mark.parametrize(("path", "body", "named"), [
    pytest.param("/v1/agents", b'{"name": "s", "model": "%s", "metadata": {"k": "\\ud800"}}',
                 "metadata", id="agent-metadata"),
    pytest.param("/v1/environments", b'{"name": "s", "metadata": {"k": "\\udfff"}}', "metadata",
                 id="environment-metadata"),
    pytest.param("/v1/sessions/@", b'{"title": "\\ud800"}', "title", id="session-title"),
    pytest.param("/v1/sessions/@/events",
                 b'{"events": [{"type": "user.message", "content": [{"type": "text", '
                 b'"text": "\\udbff"}]}]}', "text", id="message-text"),
])
def test_lone_surrogates_are_refused_not_stored(client: anthropic.Anthropic, ids: Ids, path: str,
                                                body: bytes, named: str) -> None:
    """`"\\ud800"` is valid JSON text but no string UTF-8 can encode, so no response can hold
    it: storing it breaks every later read of the object and of any list that includes it."""
    session_id, _ = make_session(client)
    target = path.replace("@", session_id)
    content = body.replace(b"%s", MODEL.encode())
    refused(anthropic.BadRequestError, post(client, target, content=content), named)
    client.beta.sessions.retrieve(session_id)
    assert events(client, session_id) == []


@pytest.mark.parametrize(("path", "body"), [
    pytest.param("/v1/sessions", {"agent": {"type": "agent"}, "environment_id": "env_x"},
                 id="agent-reference"),
    pytest.param("/v1/agents", {"name": "a", "model": MODEL, "metadata": {"k": 5}},
                 id="metadata-value"),
])
def test_messages_speak_wire_not_validator_internals(client: anthropic.Anthropic, path: str,
                                                     body: dict[str, Any]) -> None:
    error = refused(anthropic.BadRequestError, post(client, path, body))
    for internal in ("tagged-union", "constrained-str", "function-after", "AgentRef"):
        assert internal not in error.api_message, error.api_message  # type: ignore[attr-defined]
