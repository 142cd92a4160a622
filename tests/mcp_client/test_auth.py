"""OAuth refresh of MCP credentials in process: the token request's client authentication,
refresh on a 401, what is stored, and a refused refresh."""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from corral.mcp.auth import token_request
from corral.mcp.client import McpClient, McpFailure, ServerRef
from corral.outbound import server_policy
from corral.vault.secrets import ResolvedSecret, Secret, SecretMatch
from tests.fakes.mcp_server import McpTestServer, OAuthClient


@pytest.mark.parametrize(
    ("method", "in_form", "basic"),
    [
        ("none", {"client_id": "app"}, None),
        ("client_secret_post", {"client_id": "app", "client_secret": "s&c"}, None),
        ("client_secret_basic", {}, "app:s%26c"),
    ],
)
def test_client_authentication_per_method(
    method: str, in_form: dict[str, str], basic: str | None
) -> None:
    refresh = {"client_id": "app", "token_endpoint_auth": {"type": method}, "scope": "read"}
    data, headers = token_request(refresh, {"refresh_token": "r", "client_secret": "s&c"})
    assert data["grant_type"] == "refresh_token" and data["refresh_token"] == "r"
    assert data["scope"] == "read"
    for key in ("client_id", "client_secret"):
        assert data.get(key) == in_form.get(key)
    if basic is None:
        assert "Authorization" not in headers
    else:
        assert headers["Authorization"] == "Basic " + base64.b64encode(basic.encode()).decode()


class OAuthVault:
    """A `SecretResolver` with one mcp_oauth credential; records what a refresh stored."""

    def __init__(self, url: str, token_url: str) -> None:
        self.auth = {
            "type": "mcp_oauth",
            "mcp_server_url": url,
            "refresh": {
                "client_id": "app",
                "token_endpoint": token_url,
                "token_endpoint_auth": {"type": "none"},
            },
        }
        self.secrets = {"access_token": "stale", "refresh_token": "r-1"}
        self.stored: list[tuple[dict[str, str], str | None]] = []

    async def resolve_secret(
        self, vault_ids: Sequence[str], match: SecretMatch
    ) -> ResolvedSecret | None:
        if match.mcp_server_url != self.auth["mcp_server_url"]:
            return None
        secrets = {k: Secret(v) for k, v in self.secrets.items()}
        return ResolvedSecret(
            vault_id="vlt_1", credential_id="vcrd_1", auth=dict(self.auth), secrets=secrets
        )

    async def resolve_all(self, vault_ids: Sequence[str], match: SecretMatch) -> list[Any]:
        found = await self.resolve_secret(vault_ids, match)
        return [found] if found else []

    async def store_refreshed(
        self, found: ResolvedSecret, secrets: dict[str, str], *, expires_at: str | None = None
    ) -> None:
        self.stored.append((secrets, expires_at))
        self.secrets.update(secrets)


@pytest.fixture
def mcp() -> Iterator[McpTestServer]:
    with McpTestServer(tokens=set()) as server:
        server.oauth = OAuthClient(
            refresh_token="r-1", client_id="app", auth_method="none", next_tokens=["fresh"]
        )
        yield server


@pytest.mark.anyio
async def test_a_401_refreshes_once_and_the_new_token_is_stored(mcp: McpTestServer) -> None:
    vault = OAuthVault(mcp.url, mcp.token_url)
    client = McpClient(vault, server_policy([f"127.0.0.1:{mcp.port}"]))
    tools = await client.list_tools(ServerRef("calc", mcp.url), ["vlt_1"])
    assert tools
    assert mcp.seen_auth[0] == "Bearer stale" and "Bearer fresh" in mcp.seen_auth
    assert len(mcp.token_requests) == 1 and mcp.token_requests[0]["client_id"] == "app"
    [(stored, expires_at)] = vault.stored
    assert stored == {"access_token": "fresh"} and expires_at is not None
    await client.list_tools(ServerRef("calc", mcp.url), ["vlt_1"])
    assert len(mcp.token_requests) == 1  # the stored token is used from then on


@pytest.mark.anyio
async def test_a_refused_refresh_is_an_authentication_failure(mcp: McpTestServer) -> None:
    assert mcp.oauth is not None
    mcp.oauth.refresh_token = "another"
    vault = OAuthVault(mcp.url, mcp.token_url)
    client = McpClient(vault, server_policy([f"127.0.0.1:{mcp.port}"]))
    with pytest.raises(McpFailure) as info:
        await client.list_tools(ServerRef("calc", mcp.url), ["vlt_1"])
    failure = info.value
    assert failure.error_type == "mcp_authentication_failed_error"
    assert failure.refresh is not None and failure.refresh.status == "failed"
    assert failure.refresh.http is not None and failure.refresh.http.status_code == 400
    assert "r-1" not in failure.message and vault.stored == []
