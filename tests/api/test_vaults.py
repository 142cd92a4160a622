"""Vaults and credentials through the official SDK against a real server; secrets planted as
canaries must never come back in a response, an event, a log line or the data dir."""

from __future__ import annotations

import secrets
import stat
from datetime import UTC, datetime, timedelta
from typing import Any

import anthropic
import psycopg
import pytest
from psycopg import sql

from tests.api.bad_input_support import post, refused
from tests.api.helpers import make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.server import ServerProcess

MCP = "https://mcp.example.com/sse"
LATER = datetime.now(UTC) + timedelta(days=30)


def test_vault_lifecycle(server: ServerProcess) -> None:
    client = server.client()
    vault = client.beta.vaults.create(display_name="team", metadata={"a": "1", "b": "2"})
    assert vault.type == "vault" and vault.id.startswith("vlt_") and vault.archived_at is None
    assert client.beta.vaults.retrieve(vault.id) == vault
    updated = client.beta.vaults.update(
        vault.id, display_name="team2", metadata={"a": None, "c": "3"}
    )
    assert updated.display_name == "team2" and updated.metadata == {"b": "2", "c": "3"}
    assert updated.updated_at >= vault.updated_at
    made = [client.beta.vaults.create(display_name=f"p{i}").id for i in range(3)]
    seen = [v.id for v in client.beta.vaults.list(limit=2)]
    assert set(made) | {vault.id} <= set(seen) and len(seen) == len(set(seen))
    first = client.beta.vaults.list(limit=1)
    assert len(first.data) == 1 and first.next_page is not None
    archived = client.beta.vaults.archive(vault.id)
    assert archived.archived_at is not None
    assert vault.id not in [v.id for v in client.beta.vaults.list()]
    assert vault.id in [v.id for v in client.beta.vaults.list(include_archived=True)]
    deleted = client.beta.vaults.delete(made[0])
    assert (deleted.id, deleted.type) == (made[0], "vault_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.vaults.retrieve(made[0])
    with pytest.raises(anthropic.NotFoundError):
        client.beta.vaults.delete(made[0])


def _oauth(access: str, refresh: str, client_secret: str) -> dict[str, Any]:
    return {
        "type": "mcp_oauth",
        "mcp_server_url": MCP,
        "access_token": access,
        "expires_at": LATER,
        "refresh": {
            "client_id": "client-1",
            "refresh_token": refresh,
            "token_endpoint": "https://auth.example.com/token",
            "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": client_secret},
            "scope": "read write",
        },
    }


def _env_var(value: str) -> dict[str, Any]:
    return {
        "type": "environment_variable",
        "secret_name": "API_TOKEN",
        "secret_value": value,
        "networking": {"type": "limited", "allowed_hosts": ["api.example.com", "*.example.org"]},
    }


def test_credential_kinds_round_trip(server: ServerProcess) -> None:
    client = server.client()
    creds = client.beta.vaults.credentials
    vault = client.beta.vaults.create(display_name="kinds").id
    bearer = creds.create(
        vault,
        auth={"type": "static_bearer", "mcp_server_url": MCP, "token": "t"},
        display_name="bearer",
        metadata={"k": "v"},
    )
    assert bearer.type == "vault_credential" and bearer.id.startswith("vcrd_")
    assert bearer.vault_id == vault and bearer.display_name == "bearer"
    assert bearer.auth.model_dump() == {"type": "static_bearer", "mcp_server_url": MCP}
    oauth = creds.create(vault, auth=_oauth("a", "r", "c"))  # type: ignore[arg-type]
    assert oauth.display_name is None and oauth.auth.type == "mcp_oauth"
    assert oauth.auth.model_dump(exclude_none=True) == {
        "type": "mcp_oauth",
        "mcp_server_url": MCP,
        "expires_at": LATER,
        "refresh": {
            "client_id": "client-1",
            "token_endpoint": "https://auth.example.com/token",
            "token_endpoint_auth": {"type": "client_secret_basic"},
            "scope": "read write",
        },
    }
    env = creds.create(vault, auth=_env_var("v"))  # type: ignore[arg-type]
    assert env.auth.model_dump() == {
        "type": "environment_variable",
        "secret_name": "API_TOKEN",
        "networking": {"type": "limited", "allowed_hosts": ["api.example.com", "*.example.org"]},
        "injection_location": {"header": True, "body": False},
    }
    assert creds.retrieve(env.id, vault_id=vault) == env
    listed = [c.id for c in creds.list(vault, limit=1)]
    assert sorted(listed) == sorted([bearer.id, oauth.id, env.id])  # one page at a time

    changed = creds.update(
        oauth.id,
        vault_id=vault,
        auth={"type": "mcp_oauth", "access_token": "a2", "refresh": {"scope": ""}},
        metadata={"x": "y"},
    )
    assert changed.auth.refresh is not None and changed.auth.refresh.scope is None  # type: ignore[union-attr]
    assert changed.auth.expires_at == LATER and changed.metadata == {"x": "y"}  # type: ignore[union-attr]
    env2 = creds.update(
        env.id,
        vault_id=vault,
        auth={
            "type": "environment_variable",
            "networking": {"type": "unrestricted"},
            "injection_location": {"body": True},
        },
        display_name="renamed",
    )
    assert env2.display_name == "renamed"
    assert env2.auth.model_dump()["networking"] == {"type": "unrestricted"}
    assert env2.auth.model_dump()["injection_location"] == {"header": True, "body": True}
    assert (
        creds.update(bearer.id, vault_id=vault, auth={"type": "static_bearer", "token": "t2"}).auth
        == bearer.auth
    )

    archived = creds.archive(bearer.id, vault_id=vault)
    assert archived.archived_at is not None
    assert sorted(c.id for c in creds.list(vault)) == sorted([oauth.id, env.id])
    assert bearer.id in [c.id for c in creds.list(vault, include_archived=True)]
    gone = creds.delete(env.id, vault_id=vault)
    assert (gone.id, gone.type) == (env.id, "vault_credential_deleted")
    with pytest.raises(anthropic.NotFoundError):
        creds.retrieve(env.id, vault_id=vault)
    other = client.beta.vaults.create(display_name="other").id
    with pytest.raises(anthropic.NotFoundError):  # a credential is addressed through its vault
        creds.retrieve(oauth.id, vault_id=other)
    client.beta.vaults.delete(vault)
    with pytest.raises(anthropic.NotFoundError):
        creds.retrieve(oauth.id, vault_id=vault)


def test_immutable_fields_are_refused(server: ServerProcess) -> None:
    client = server.client()
    creds = client.beta.vaults.credentials
    vault = client.beta.vaults.create(display_name="immutable").id
    env = creds.create(vault, auth=_env_var("v"))  # type: ignore[arg-type]
    path = f"/v1/vaults/{vault}/credentials/{env.id}"
    refused(
        anthropic.BadRequestError,
        lambda: creds.update(env.id, vault_id=vault, auth={"type": "static_bearer", "token": "x"}),
        "type",
    )
    refused(
        anthropic.BadRequestError,
        post(client, path, {"auth": {"type": "environment_variable", "secret_name": "OTHER"}}),
        "secret_name",
    )
    oauth = creds.create(vault, auth=_oauth("a", "r", "c"))  # type: ignore[arg-type]
    refused(
        anthropic.BadRequestError,
        post(
            client,
            f"/v1/vaults/{vault}/credentials/{oauth.id}",
            {"auth": {"type": "mcp_oauth", "refresh": {"client_id": "new"}}},
        ),
        "client_id",
    )
    refused(
        anthropic.BadRequestError,
        post(
            client,
            f"/v1/vaults/{vault}/credentials/{oauth.id}",
            {"auth": {"type": "mcp_oauth", "mcp_server_url": "https://evil.example.com"}},
        ),
        "mcp_server_url",
    )
    assert creds.retrieve(env.id, vault_id=vault) == env
    assert creds.retrieve(oauth.id, vault_id=vault) == oauth


def test_sessions_take_vaults_at_creation_only(server: ServerProcess) -> None:
    client = server.client()
    vault = client.beta.vaults.create(display_name="for-sessions").id
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="v")
    env = client.beta.environments.create(name="v").id
    session = client.beta.sessions.create(agent=agent.id, environment_id=env, vault_ids=[vault])
    assert session.vault_ids == [vault]
    assert client.beta.sessions.retrieve(session.id).vault_ids == [vault]
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.update(session.id, vault_ids=[]),
        "vault_ids",
    )
    assert client.beta.sessions.retrieve(session.id).vault_ids == [vault]
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.create(
            agent=agent.id, environment_id=env, vault_ids=["vlt_01abcdefghjkmnpqrstvwxyz00"]
        ),
        "vault_ids[0]",
    )
    client.beta.vaults.archive(vault)
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.create(agent=agent.id, environment_id=env, vault_ids=[vault]),
        "archived",
    )


def _canaries() -> dict[str, str]:
    return {
        name: f"CANARY{name.upper().replace('_', '')}{secrets.token_hex(8)}"
        for name in (
            "token",
            "token2",
            "access",
            "access2",
            "refresh",
            "refresh2",
            "client_secret",
            "client_secret2",
            "secret_value",
            "secret_value2",
        )
    }


def _plant(client: anthropic.Anthropic, vault: str, canary: dict[str, str]) -> list[str]:
    """Every secret field written at create and again at update; returns the responses."""
    creds = client.beta.vaults.credentials
    out: list[Any] = []
    bearer = creds.create(
        vault, auth={"type": "static_bearer", "mcp_server_url": MCP, "token": canary["token"]}
    )
    oauth = creds.create(
        vault, auth=_oauth(canary["access"], canary["refresh"], canary["client_secret"])
    )  # type: ignore[arg-type]
    env = creds.create(vault, auth=_env_var(canary["secret_value"]))  # type: ignore[arg-type]
    out += [bearer, oauth, env]
    out.append(
        creds.update(
            bearer.id, vault_id=vault, auth={"type": "static_bearer", "token": canary["token2"]}
        )
    )
    out.append(
        creds.update(
            oauth.id,
            vault_id=vault,
            auth={
                "type": "mcp_oauth",
                "access_token": canary["access2"],
                "refresh": {
                    "refresh_token": canary["refresh2"],
                    "token_endpoint_auth": {
                        "type": "client_secret_post",
                        "client_secret": canary["client_secret2"],
                    },
                },
            },
        )
    )
    out.append(
        creds.update(
            env.id,
            vault_id=vault,
            auth={"type": "environment_variable", "secret_value": canary["secret_value2"]},
        )
    )
    out += [creds.retrieve(c.id, vault_id=vault) for c in (bearer, oauth, env)]
    out += list(creds.list(vault, include_archived=True))
    out.append(creds.archive(bearer.id, vault_id=vault))
    return [o.model_dump_json() for o in out]


def _database_text(server: ServerProcess) -> str:
    """Every row of every table, as text (PostgreSQL; SQLite lives in the data dir)."""
    url = server.extra_env.get("CORRAL_DATABASE_URL")
    if not url:
        return ""
    chunks = []
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
        for (table,) in tables:
            query = sql.SQL("SELECT t::text FROM {} t").format(sql.Identifier(table))
            rows = conn.execute(query).fetchall()
            chunks.extend(str(r[0]) for r in rows)
    assert chunks, "the database dump is empty: the check would prove nothing"
    return "\n".join(chunks)


def test_no_secret_in_responses_events_logs_or_storage(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    canary = _canaries()
    vault = client.beta.vaults.create(display_name="canaries").id
    seen = _plant(client, vault, canary)
    fake_model.reset(ScriptedTurns([Turn([Text("hello")])], repeat_last=True))
    session_id, _ = make_session(client)
    with_vault = client.beta.sessions.create(
        agent=client.beta.sessions.retrieve(session_id).agent.id,
        environment_id=client.beta.sessions.retrieve(session_id).environment_id,
        vault_ids=[vault],
    )
    say(client, with_vault.id, "use the vault")
    wait_idle(client, with_vault.id)
    seen += [e.model_dump_json() for e in client.beta.sessions.events.list(with_vault.id)]
    seen.append(client.beta.sessions.retrieve(with_vault.id).model_dump_json())
    seen += [v.model_dump_json() for v in client.beta.vaults.list(include_archived=True)]
    stored = b"".join(p.read_bytes() for p in sorted(server.data_dir.rglob("*")) if p.is_file())
    assert b"CREATE TABLE" in stored or server.extra_env.get("CORRAL_DATABASE_URL")
    assert b"use the vault" in stored or server.extra_env.get("CORRAL_DATABASE_URL")
    database = _database_text(server)
    for name, value in canary.items():
        for text in seen:
            assert value not in text, f"{name} returned in a response"
        assert value.encode() not in stored, f"{name} found in the data dir (db, logs, files)"
        assert value not in database, f"{name} found in a database row"
    key_file = server.data_dir / "vault.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert str(key_file) in server.log_path.read_text()
