"""`McpClient` in process against a real MCP server: transports, auth, failures, egress rules.
(The end-to-end behaviour through a Corral server is in tests/api/test_mcp.py.)"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from corral.mcp.client import McpClient, McpFailure, ServerRef
from corral.outbound import server_policy
from corral.vault.secrets import ResolvedSecret, Secret, SecretMatch
from tests.fakes.mcp_server import McpTestServer
from tests.server import free_port

TOKEN = "tok-in-process"


class OneCredential:
    """A `SecretResolver` holding one static bearer credential for one URL."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    async def resolve_secret(
        self, vault_ids: Sequence[str], match: SecretMatch
    ) -> ResolvedSecret | None:
        if match.mcp_server_url != self.url:
            return None
        auth = {"type": "static_bearer", "mcp_server_url": self.url}
        return ResolvedSecret(
            vault_id="vlt_1",
            credential_id="vcrd_1",
            auth=auth,
            secrets={"token": Secret(self.token)},
        )

    async def resolve_all(self, vault_ids: Sequence[str], match: SecretMatch) -> list[Any]:
        found = await self.resolve_secret(vault_ids, match)
        return [found] if found else []

    async def store_refreshed(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("static credentials are never refreshed")


@pytest.fixture(scope="module")
def mcp() -> Iterator[McpTestServer]:
    with McpTestServer(tokens={TOKEN}) as server:
        yield server


def client_for(mcp: McpTestServer, url: str, token: str = TOKEN, **kw: Any) -> McpClient:
    return McpClient(OneCredential(url, token), server_policy([f"127.0.0.1:{mcp.port}"]), **kw)


@pytest.mark.anyio
@pytest.mark.parametrize("which", ["url", "sse_url", "legacy_url"])
async def test_every_transport_lists_and_calls(mcp: McpTestServer, which: str) -> None:
    url = getattr(mcp, which)
    client = client_for(mcp, url.rstrip("/") + "/")  # the credential's URL has a trailing slash
    server = ServerRef("calc", url)
    tools = await client.list_tools(server, ["vlt_1"])
    assert {"add", "echo", "slow", "dotted.name"} <= {t.name for t in tools}
    add = next(t for t in tools if t.name == "add")
    assert add.input_schema["type"] == "object" and "a" in add.input_schema["properties"]
    outcome = await client.call_tool(server, ["vlt_1"], "add", {"a": 20, "b": 22})
    assert outcome.content == [{"type": "text", "text": "42"}] and not outcome.is_error
    bad = await client.call_tool(server, ["vlt_1"], "add", {"a": "x"})
    assert bad.is_error  # a tool error is a result, not a failure


@pytest.mark.anyio
async def test_wrong_and_missing_tokens_are_authentication_failures(mcp: McpTestServer) -> None:
    for client in (client_for(mcp, mcp.url, "wrong"), client_for(mcp, "http://elsewhere/")):
        with pytest.raises(McpFailure) as info:
            await client.list_tools(ServerRef("calc", mcp.url), ["vlt_1"])
        assert info.value.error_type == "mcp_authentication_failed_error"
        assert info.value.http is not None and info.value.http.status_code == 401
        assert "wrong" not in info.value.message


@pytest.mark.anyio
async def test_loopback_is_refused_without_a_rule(mcp: McpTestServer) -> None:
    client = McpClient(OneCredential(mcp.url, TOKEN), server_policy([]))
    seen = len(mcp.seen_auth)
    with pytest.raises(McpFailure) as info:
        await client.list_tools(ServerRef("calc", mcp.url), ["vlt_1"])
    assert info.value.error_type == "mcp_connection_failed_error"
    assert "refused" in info.value.message and len(mcp.seen_auth) == seen


@pytest.mark.anyio
async def test_dead_and_silent_servers_fail_in_bounded_time(mcp: McpTestServer) -> None:
    port = free_port()
    dead = McpClient(OneCredential("x", TOKEN), server_policy([f"127.0.0.1:{port}"]))
    with pytest.raises(McpFailure) as info:
        await dead.list_tools(ServerRef("gone", f"http://127.0.0.1:{port}/mcp"), [])
    assert info.value.error_type == "mcp_connection_failed_error" and "gone" in info.value.message
    mcp.slow_seconds = 30
    try:
        client = client_for(mcp, mcp.url, call_timeout=0.5)
        with pytest.raises(McpFailure) as info:
            await client.call_tool(ServerRef("calc", mcp.url), ["vlt_1"], "slow", {"text": "z"})
        assert "in time" in info.value.message
    finally:
        mcp.slow_seconds = 0
