"""MCP toolsets end to end: the official SDK against a real Corral server, a real MCP server
(the `mcp` SDK's FastMCP, streamable HTTP and HTTP+SSE) that requires a bearer token, a local
OAuth token endpoint, and the fake model scripted to call the MCP tools. SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import pytest

from tests.api.helpers import assert_log_sound, events, say, wait_idle
from tests.fakes.mcp_server import McpTestServer, OAuthClient
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import ServerProcess, backend_env, free_port

CANARY = "canary-mcp-7f3a9c"
STATIC = f"{CANARY}-static"
ALLOW = {"type": "always_allow"}


@pytest.fixture(scope="module")
def mcp() -> Iterator[McpTestServer]:
    with McpTestServer(tokens={STATIC}) as server:
        yield server


@pytest.fixture(scope="module")
def dead_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def corral(
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModelServer,
    backend: str,
    mcp: McpTestServer,
    dead_port: int,
) -> Iterator[ServerProcess]:
    """Corral allowed to reach the MCP server's and the dead port's loopback addresses only."""
    allowed = f"127.0.0.1:{mcp.port},127.0.0.1:{dead_port}"
    with backend_env(backend) as env:
        proc = ServerProcess(
            tmp_path_factory.mktemp("corral-mcp"),
            model_url=fake_model.url,
            env={**env, "CORRAL_EGRESS_ALLOW_PRIVATE": allowed, "CORRAL_LEASE_SECONDS": "2"},
        ).start()
        yield proc
        proc.stop()


@pytest.fixture(autouse=True)
def _reset(mcp: McpTestServer) -> None:
    mcp.tokens = {STATIC}
    mcp.calls.clear()
    mcp.seen_auth.clear()
    mcp.oauth = None
    mcp.token_requests.clear()
    mcp.slow_seconds = 0.0


def mcp_session(
    client: anthropic.Anthropic,
    url: str,
    *,
    auth: dict[str, Any] | None = None,
    toolset: dict[str, Any] | None = None,
    networking: dict[str, Any] | None = None,
    server_name: str = "calc",
) -> tuple[str, str | None]:
    """An agent with one MCP server, a vault with `auth` (if any) and a session; returns
    (session id, credential id)."""
    vault = client.beta.vaults.create(display_name="mcp")
    credential_id = None
    if auth is not None:
        credential = client.beta.vaults.credentials.create(vault.id, auth=auth)  # type: ignore[arg-type]
        credential_id = credential.id
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="mcp-user",
        mcp_servers=[{"type": "url", "name": server_name, "url": url}],
        tools=[{"type": "mcp_toolset", "mcp_server_name": server_name, **(toolset or {})}],  # type: ignore[list-item]
    )
    config: dict[str, Any] = {"type": "cloud"}
    if networking is not None:
        config["networking"] = networking
    env = client.beta.environments.create(name="e", config=config)  # type: ignore[arg-type]
    session = client.beta.sessions.create(
        agent=agent.id, environment_id=env.id, vault_ids=[vault.id]
    )
    return session.id, credential_id


def bearer(url: str, token: str = STATIC) -> dict[str, Any]:
    return {"type": "static_bearer", "token": token, "mcp_server_url": url}


def of_type(log: list[Any], kind: str) -> list[Any]:
    return [e for e in log if e.type == kind]


def assert_no_secret(corral: ServerProcess, client: anthropic.Anthropic, session_id: str) -> None:
    dump = json.dumps([e.model_dump(mode="json") for e in events(client, session_id)])
    assert CANARY not in dump
    assert CANARY not in corral.log_path.read_text(errors="replace")
    # Nor anywhere in the data dir: the database (SQLite), its WAL, sandboxes, files.
    for path in corral.data_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert CANARY.encode() not in path.read_bytes(), path


def test_static_bearer_call_with_always_allow(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    fake_model.reset([Turn([ToolUse("mcp__calc__add", {"a": 2, "b": 3})]), Turn([Text("5")])])
    client = corral.client()
    # The credential names the URL with a trailing slash: it still matches.
    session_id, _ = mcp_session(
        client,
        mcp.url,
        auth=bearer(mcp.url + "/"),
        toolset={"default_config": {"permission_policy": ALLOW}},
    )
    say(client, session_id, "add 2 and 3")
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    assert_log_sound(log)
    [use] = of_type(log, "agent.mcp_tool_use")
    assert (use.mcp_server_name, use.name, use.input) == ("calc", "add", {"a": 2, "b": 3})
    assert use.evaluated_permission == "allow"
    [result] = of_type(log, "agent.mcp_tool_result")
    assert result.mcp_tool_use_id == use.id and not result.is_error
    assert result.content[0].text == "5"
    assert mcp.calls == [("add", {"a": 2, "b": 3})]
    assert f"Bearer {STATIC}" in mcp.seen_auth
    first, second = fake_model.requests[-2:]
    names = {t["name"] for t in first["tools"]}
    assert {"mcp__calc__add", "mcp__calc__echo", "mcp__calc__slow"} <= names
    assert any(n.startswith("mcp__calc__dotted_name_") for n in names)  # sanitised + digest
    call = second["messages"][-2]["content"][-1]
    assert call["type"] == "tool_use" and call["name"] == "mcp__calc__add"
    answer = second["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer["content"][0]["text"] == "5"
    assert not of_type(log, "session.error")
    assert_no_secret(corral, client, session_id)


def test_always_ask_waits_for_confirmation_and_honours_configs(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    fake_model.reset(
        [
            Turn(
                [
                    ToolUse("mcp__calc__add", {"a": 1, "b": 1}),
                    ToolUse("mcp__calc__echo", {"text": "hi"}),
                ]
            ),
            Turn([Text("done")]),
        ]
    )
    client = corral.client()
    toolset = {
        "configs": [
            {"name": "echo", "permission_policy": ALLOW},
            {"name": "slow", "enabled": False},
        ]
    }
    session_id, _ = mcp_session(client, mcp.url, auth=bearer(mcp.url), toolset=toolset)
    say(client, session_id, "go")
    idle = wait_idle(client, session_id, stop="requires_action")
    log = events(client, session_id)
    uses = {u.name: u for u in of_type(log, "agent.mcp_tool_use")}
    assert uses["add"].evaluated_permission == "ask"  # the MCP toolset default
    assert uses["echo"].evaluated_permission == "allow"
    assert idle.stop_reason.event_ids == [uses["add"].id]
    assert mcp.calls == [("echo", {"text": "hi"})]  # the allowed one ran, the asked one waits
    names = {t["name"] for t in fake_model.requests[-1]["tools"]}
    assert "mcp__calc__slow" not in names and "mcp__calc__add" in names
    client.beta.sessions.events.send(
        session_id,
        events=[
            {"type": "user.tool_confirmation", "tool_use_id": uses["add"].id, "result": "allow"}
        ],
    )
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    assert_log_sound(log)
    assert sorted(c[0] for c in mcp.calls) == ["add", "echo"]
    results = {r.mcp_tool_use_id: r for r in of_type(log, "agent.mcp_tool_result")}
    assert results[uses["add"].id].content[0].text == "2"


def test_call_failure_tells_the_model_and_names_the_server(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    fake_model.reset([Turn([ToolUse("mcp__calc__echo", {"text": "x"})]), Turn([Text("sorry")])])
    client = corral.client()
    session_id, _ = mcp_session(client, mcp.url, auth=bearer(mcp.url))
    say(client, session_id, "go")
    idle = wait_idle(client, session_id, stop="requires_action")
    mcp.tokens = set()  # the token is revoked between listing and the call
    client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.tool_confirmation",
                "tool_use_id": idle.stop_reason.event_ids[0],
                "result": "allow",
            }
        ],
    )
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    [error] = of_type(log, "session.error")
    assert error.error.type == "mcp_authentication_failed_error"
    assert error.error.mcp_server_name == "calc"
    [result] = of_type(log, "agent.mcp_tool_result")
    assert result.is_error and "calc" in result.content[0].text
    told = fake_model.requests[-1]["messages"][-1]["content"][0]
    assert told["type"] == "tool_result" and told.get("is_error") is True
    assert mcp.calls == []
    assert_no_secret(corral, client, session_id)


def test_expired_oauth_token_is_refreshed_and_stored(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    mcp.oauth = OAuthClient(
        refresh_token=f"{CANARY}-refresh",
        client_id="corral-test",
        client_secret=f"{CANARY}-client-secret",
        auth_method="client_secret_basic",
        next_tokens=[f"{CANARY}-fresh-1"],
    )
    soon = (datetime.now(UTC) + timedelta(seconds=20)).isoformat().replace("+00:00", "Z")
    auth = {
        "type": "mcp_oauth",
        "mcp_server_url": mcp.url,
        "access_token": f"{CANARY}-old-access",
        "expires_at": soon,  # within the refresh margin: refreshed before use
        "refresh": {
            "client_id": "corral-test",
            "refresh_token": f"{CANARY}-refresh",
            "token_endpoint": mcp.token_url,
            "token_endpoint_auth": {
                "type": "client_secret_basic",
                "client_secret": f"{CANARY}-client-secret",
            },
        },
    }
    fake_model.reset([Turn([ToolUse("mcp__calc__add", {"a": 4, "b": 4})]), Turn([Text("8")])])
    client = corral.client()
    toolset = {"default_config": {"permission_policy": ALLOW}}
    session_id, credential_id = mcp_session(client, mcp.url, auth=auth, toolset=toolset)
    say(client, session_id, "add")
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    assert not of_type(log, "session.error")
    assert of_type(log, "agent.mcp_tool_result")[0].content[0].text == "8"
    assert len(mcp.token_requests) == 1
    assert mcp.token_requests[0]["grant_type"] == "refresh_token"
    assert f"Bearer {CANARY}-old-access" not in mcp.seen_auth
    # The refreshed token was stored: a new session uses it without another refresh.
    vault_id = client.beta.sessions.retrieve(session_id).vault_ids[0]
    assert credential_id is not None
    stored = client.beta.vaults.credentials.retrieve(credential_id, vault_id=vault_id)
    assert stored.auth.expires_at is not None and stored.auth.expires_at > datetime.now(
        UTC
    ) + timedelta(minutes=30)
    fake_model.reset([Turn([ToolUse("mcp__calc__add", {"a": 1, "b": 0})]), Turn([Text("1")])])
    agent_id = client.beta.sessions.retrieve(session_id).agent.id
    env_id = client.beta.sessions.retrieve(session_id).environment_id
    again = client.beta.sessions.create(agent=agent_id, environment_id=env_id, vault_ids=[vault_id])
    say(client, again.id, "add")
    wait_idle(client, again.id, stop="end_turn")
    assert len(mcp.token_requests) == 1
    assert of_type(events(client, again.id), "agent.mcp_tool_result")[0].content[0].text == "1"
    assert_no_secret(corral, client, session_id)


def test_refresh_on_401_and_validate(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    mcp.oauth = OAuthClient(
        refresh_token=f"{CANARY}-r2",
        client_id="corral-post",
        client_secret=f"{CANARY}-post-secret",
        auth_method="client_secret_post",
        next_tokens=[f"{CANARY}-fresh-2"],
    )
    client = corral.client()
    vault = client.beta.vaults.create(display_name="oauth")
    refresh = {
        "client_id": "corral-post",
        "refresh_token": f"{CANARY}-r2",
        "token_endpoint": mcp.token_url,
        "token_endpoint_auth": {
            "type": "client_secret_post",
            "client_secret": f"{CANARY}-post-secret",
        },
    }
    credential = client.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "mcp_oauth",
            "mcp_server_url": mcp.url,
            "access_token": f"{CANARY}-stale",
            "refresh": refresh,
        },  # type: ignore[typeddict-item]
    )
    report = client.beta.vaults.credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert report.type == "vault_credential_validation"
    assert (report.status, report.has_refresh_token, report.mcp_probe) == ("valid", True, None)
    assert report.refresh is not None and report.refresh.status == "succeeded"
    assert mcp.token_requests[0]["client_secret"] == f"{CANARY}-post-secret"
    # Now stored and valid: no refresh needed.
    report = client.beta.vaults.credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert (report.status, report.refresh) == ("valid", None)
    # A refused refresh: invalid, with the token endpoint's answer (scrubbed).
    mcp.tokens = set()
    mcp.oauth.refresh_token = "something-else"
    report = client.beta.vaults.credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert report.status == "invalid" and report.refresh is not None
    assert report.refresh.status == "failed"
    assert (
        report.refresh.http_response is not None and report.refresh.http_response.status_code == 400
    )
    assert report.mcp_probe is not None and report.mcp_probe.method == "initialize"
    assert CANARY not in report.model_dump_json()
    # A static bearer credential is not validated this way.
    other = client.beta.vaults.credentials.create(
        vault.id, auth=bearer("https://example.invalid/mcp")
    )  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError):
        client.beta.vaults.credentials.mcp_oauth_validate(other.id, vault_id=vault.id)


def test_validate_unreachable_server_is_unknown(corral: ServerProcess, dead_port: int) -> None:
    client = corral.client()
    vault = client.beta.vaults.create(display_name="dead")
    url = f"http://127.0.0.1:{dead_port}/mcp"
    credential = client.beta.vaults.credentials.create(
        vault.id, auth={"type": "mcp_oauth", "mcp_server_url": url, "access_token": f"{CANARY}-a"}
    )
    report = client.beta.vaults.credentials.mcp_oauth_validate(credential.id, vault_id=vault.id)
    assert (report.status, report.has_refresh_token) == ("unknown", False)
    assert report.mcp_probe is not None and report.mcp_probe.http_response is None


def test_wrong_token_is_an_authentication_failure(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    fake_model.reset([Turn([Text("no tools today")])])
    client = corral.client()
    session_id, _ = mcp_session(client, mcp.url, auth=bearer(mcp.url, f"{CANARY}-wrong"))
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    [error] = of_type(log, "session.error")
    assert error.error.type == "mcp_authentication_failed_error"
    assert error.error.mcp_server_name == "calc"
    request = fake_model.requests[-1]
    assert not [t for t in request.get("tools") or [] if t["name"].startswith("mcp__")]
    assert "calc" in str(request["system"])  # the model is told the server is unavailable
    assert of_type(log, "agent.message")[0].content[0].text == "no tools today"
    assert_no_secret(corral, client, session_id)


def test_dead_server_is_a_connection_failure(
    corral: ServerProcess, fake_model: FakeModelServer, dead_port: int
) -> None:
    fake_model.reset([Turn([Text("ok")])])
    client = corral.client()
    url = f"http://127.0.0.1:{dead_port}/mcp"
    session_id, _ = mcp_session(client, url, auth=bearer(url))
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    [error] = of_type(events(client, session_id), "session.error")
    assert error.error.type == "mcp_connection_failed_error"
    assert error.error.mcp_server_name == "calc"


def test_sse_transport(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    fake_model.reset([Turn([ToolUse("mcp__old__echo", {"text": "via sse"})]), Turn([Text("ok")])])
    client = corral.client()
    session_id, _ = mcp_session(
        client,
        mcp.sse_url,
        auth=bearer(mcp.sse_url),
        toolset={"default_config": {"permission_policy": ALLOW}},
        server_name="old",
    )
    say(client, session_id, "echo")
    wait_idle(client, session_id, stop="end_turn")
    [result] = of_type(events(client, session_id), "agent.mcp_tool_result")
    assert result.content[0].text == "via sse" and not result.is_error
    assert mcp.calls == [("echo", {"text": "via sse"})]


def test_loopback_refused_without_allow_private_rule(
    corral: ServerProcess, fake_model: FakeModelServer
) -> None:
    fake_model.reset([Turn([Text("ok")])])
    client = corral.client()
    with McpTestServer(tokens={STATIC}) as unlisted:  # its port is in no allow_private rule
        session_id, _ = mcp_session(client, unlisted.url, auth=bearer(unlisted.url))
        say(client, session_id, "hi")
        wait_idle(client, session_id, stop="end_turn")
        assert unlisted.seen_auth == []  # never reached
    [error] = of_type(events(client, session_id), "session.error")
    assert error.error.type == "mcp_connection_failed_error"
    assert "refused" in error.error.message


def test_limited_networking_needs_allow_mcp_servers(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    fake_model.reset([Turn([Text("ok")])])
    client = corral.client()
    limited = {"type": "limited", "allowed_hosts": ["example.com"], "allow_mcp_servers": False}
    session_id, _ = mcp_session(client, mcp.url, auth=bearer(mcp.url), networking=limited)
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    [error] = of_type(events(client, session_id), "session.error")
    assert error.error.type == "mcp_connection_failed_error"
    assert "allow_mcp_servers" in error.error.message
    assert mcp.seen_auth == []  # never contacted
    fake_model.reset([Turn([ToolUse("mcp__calc__echo", {"text": "in"})]), Turn([Text("ok")])])
    opened = {**limited, "allow_mcp_servers": True}
    session_id, _ = mcp_session(
        client,
        mcp.url,
        auth=bearer(mcp.url),
        networking=opened,
        toolset={"default_config": {"permission_policy": ALLOW}},
    )
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    assert of_type(events(client, session_id), "agent.mcp_tool_result")[0].content[0].text == "in"


def test_crash_mid_call_is_reported_not_rerun(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    mcp.slow_seconds = 30.0
    fake_model.reset([Turn([ToolUse("mcp__calc__slow", {"text": "once"})]), Turn([Text("ok")])])
    client = corral.client()
    session_id, _ = mcp_session(
        client,
        mcp.url,
        auth=bearer(mcp.url),
        toolset={"default_config": {"permission_policy": ALLOW}},
    )
    say(client, session_id, "go")
    deadline = time.monotonic() + 20
    while not mcp.calls and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mcp.calls == [("slow", {"text": "once"})]
    corral.restart()
    client = corral.client()
    wait_idle(client, session_id, stop="end_turn", timeout=60)
    log = events(client, session_id)
    assert_log_sound(log)
    [result] = of_type(log, "agent.mcp_tool_result")
    assert result.is_error and "not run again" in result.content[0].text
    assert mcp.calls == [("slow", {"text": "once"})]


def test_custom_tool_cannot_use_the_mcp_prefix(corral: ServerProcess) -> None:
    client = corral.client()
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.agents.create(
            model="claude-sonnet-4-5",
            name="x",
            tools=[
                {
                    "type": "custom",
                    "name": "mcp__calc__add",
                    "description": "d",
                    "input_schema": {"type": "object"},
                }
            ],
        )
    assert "mcp__" in str(info.value)


def test_interrupt_cancels_a_running_call(
    corral: ServerProcess, fake_model: FakeModelServer, mcp: McpTestServer
) -> None:
    mcp.slow_seconds = 30.0
    fake_model.reset([Turn([ToolUse("mcp__calc__slow", {"text": "stop me"})]), Turn([Text("x")])])
    client = corral.client()
    session_id, _ = mcp_session(
        client,
        mcp.url,
        auth=bearer(mcp.url),
        toolset={"default_config": {"permission_policy": ALLOW}},
    )
    say(client, session_id, "go")
    deadline = time.monotonic() + 20
    while not mcp.calls and time.monotonic() < deadline:
        time.sleep(0.02)
    client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    wait_idle(client, session_id, stop="end_turn", timeout=60)
    log = events(client, session_id)
    assert_log_sound(log)
    [result] = of_type(log, "agent.mcp_tool_result")
    assert result.is_error and "Interrupted" in result.content[0].text
    assert mcp.calls == [("slow", {"text": "stop me"})]
