"""Bad input to the vault routes: a 4xx envelope naming the field, nothing stored, and no
secret echoed back in the error, whatever the body."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.bad_input_support import get, post, refused
from tests.server import API_KEY, ServerProcess

ECHO = "secret-never-echoed!"  # not a valid secret_name, URL or host: only a secret
MCP = "https://mcp.example.com/mcp"
BEARER = {"type": "static_bearer", "mcp_server_url": MCP, "token": ECHO}
REFRESH = {
    "client_id": "c",
    "refresh_token": ECHO,
    "token_endpoint": "https://auth.example.com/token",
    "token_endpoint_auth": {"type": "none"},
}
OAUTH = {"type": "mcp_oauth", "mcp_server_url": MCP, "access_token": ECHO}
ENV = {
    "type": "environment_variable",
    "secret_name": "TOKEN",
    "secret_value": ECHO,
    "networking": {"type": "unrestricted"},
}


def _limited(*hosts: str) -> dict[str, Any]:
    return {**ENV, "networking": {"type": "limited", "allowed_hosts": list(hosts)}}


@pytest.fixture(scope="module")
def vault(server: ServerProcess) -> str:
    """A vault holding one credential of each kind (the update cases address them)."""
    client = server.client()
    vault_id = client.beta.vaults.create(display_name="bad-input").id
    for auth in (BEARER, {**OAUTH, "refresh": REFRESH}, ENV):
        client.post(f"/v1/vaults/{vault_id}/credentials", body={"auth": auth}, cast_to=object)
    return vault_id


def _credentials(client: anthropic.Anthropic, vault: str) -> list[Any]:
    return list(client.beta.vaults.credentials.list(vault, include_archived=True))


@pytest.mark.parametrize(
    ("body", "named"),
    [
        pytest.param({}, ["display_name"], id="no-name"),
        pytest.param({"display_name": ""}, ["display_name"], id="empty-name"),
        pytest.param({"display_name": "x" * 256}, ["display_name"], id="long-name"),
        pytest.param({"display_name": "v", "metadata": {"k": 1}}, ["metadata"], id="meta-int"),
        pytest.param(
            {"display_name": "v", "metadata": {f"k{i}": "v" for i in range(17)}},
            ["metadata"],
            id="meta-17",
        ),
        pytest.param({"display_name": "v", "secret": ECHO}, ["secret"], id="unknown-field"),
    ],
)
def test_vault_create_refuses(server: ServerProcess, body: Any, named: list[str]) -> None:
    client = server.client()
    before = len(list(client.beta.vaults.list(include_archived=True)))
    refused(anthropic.BadRequestError, post(client, "/v1/vaults", body), *named)
    assert len(list(client.beta.vaults.list(include_archived=True))) == before


@pytest.mark.parametrize(
    ("auth", "named"),
    [
        pytest.param(None, ["auth"], id="no-auth"),
        pytest.param({"type": "basic", "token": ECHO}, ["auth"], id="unknown-kind"),
        pytest.param({**BEARER, "token": ""}, ["token"], id="empty-token"),
        pytest.param({**BEARER, "token": 12345}, ["token"], id="token-not-string"),
        pytest.param({k: v for k, v in BEARER.items() if k != "token"}, ["token"], id="no-token"),
        pytest.param({**BEARER, "mcp_server_url": "ftp://x"}, ["mcp_server_url"], id="ftp-url"),
        pytest.param({**BEARER, "mcp_server_url": "mcp"}, ["mcp_server_url"], id="not-url"),
        pytest.param({**OAUTH, "expires_at": "2001-01-01T00:00:00Z"}, ["expires_at"], id="past"),
        pytest.param({**OAUTH, "expires_at": "soon"}, ["expires_at"], id="not-a-time"),
        pytest.param(
            {**OAUTH, "expires_at": "2999-01-01T00:00:00"}, ["expires_at"], id="naive-time"
        ),
        pytest.param(
            {**OAUTH, "refresh": {k: v for k, v in REFRESH.items() if k != "client_id"}},
            ["client_id"],
            id="refresh-no-client",
        ),
        pytest.param(
            {
                **OAUTH,
                "refresh": {**REFRESH, "token_endpoint_auth": {"type": "client_secret_basic"}},
            },
            ["client_secret"],
            id="basic-no-secret",
        ),
        pytest.param(
            {**OAUTH, "refresh": {**REFRESH, "token_endpoint_auth": {"type": "mtls"}}},
            ["token_endpoint_auth"],
            id="unknown-endpoint-auth",
        ),
        pytest.param({**ENV, "secret_name": "1BAD"}, ["secret_name"], id="name-digit"),
        pytest.param({**ENV, "secret_name": "A-B"}, ["secret_name"], id="name-dash"),
        pytest.param(
            {k: v for k, v in ENV.items() if k != "networking"}, ["networking"], id="no-net"
        ),
        pytest.param(_limited("https://a.example.com"), ["allowed_hosts"], id="host-url"),
        pytest.param(_limited("a.example.com:443"), ["allowed_hosts"], id="host-port"),
        pytest.param(_limited("a.example.com/x"), ["allowed_hosts"], id="host-path"),
        pytest.param(_limited("::1"), ["allowed_hosts"], id="host-ipv6"),
        pytest.param(_limited(), ["allowed_hosts"], id="no-hosts"),
        pytest.param(
            _limited(*[f"h{i}.example.com" for i in range(17)]), ["allowed_hosts"], id="17-hosts"
        ),
        pytest.param(
            {**ENV, "injection_location": {"header": False, "body": False}},
            ["injection_location"],
            id="nowhere",
        ),
        pytest.param({**ENV, "secret_value": "x" * 16385}, ["secret_value"], id="huge-secret"),
    ],
)
def test_credential_create_refuses(
    server: ServerProcess, vault: str, auth: Any, named: list[str]
) -> None:
    client = server.client()
    before = _credentials(client, vault)
    body = {} if auth is None else {"auth": auth}
    error = refused(
        anthropic.BadRequestError, post(client, f"/v1/vaults/{vault}/credentials", body), *named
    )
    assert ECHO not in json.dumps(error.body)
    assert _credentials(client, vault) == before


@pytest.mark.parametrize(
    ("kind", "body", "named"),
    [
        ("static_bearer", {"auth": {"type": "static_bearer", "token": ""}}, ["token"]),
        ("static_bearer", {"display_name": ""}, ["display_name"]),
        ("static_bearer", {"auth": {**BEARER}}, ["mcp_server_url"]),
        (
            "mcp_oauth",
            {"auth": {"type": "mcp_oauth", "expires_at": "2000-01-01T00:00:00Z"}},
            ["expires_at"],
        ),
        (
            "mcp_oauth",
            {
                "auth": {
                    "type": "mcp_oauth",
                    "refresh": {
                        "token_endpoint_auth": {"type": "client_secret_post", "client_secret": ECHO}
                    },
                }
            },
            ["token_endpoint_auth"],
        ),
        (
            "mcp_oauth",
            {"auth": {"type": "mcp_oauth", "refresh": {"token_endpoint": MCP}}},
            ["token_endpoint"],
        ),
        (
            "environment_variable",
            {"auth": {"type": "environment_variable", "injection_location": {"header": False}}},
            ["injection_location"],
        ),
        ("environment_variable", {"auth": {"type": "mcp_oauth", "access_token": ECHO}}, ["type"]),
        ("environment_variable", {"metadata": {"": "x"}}, ["metadata"]),
    ],
)
def test_credential_update_refuses_and_changes_nothing(
    server: ServerProcess, vault: str, kind: str, body: Any, named: list[str]
) -> None:
    client = server.client()
    before = _credentials(client, vault)
    target = next(c for c in before if c.auth.type == kind)
    path = f"/v1/vaults/{vault}/credentials/{target.id}"
    error = refused(anthropic.BadRequestError, post(client, path, body), *named)
    assert ECHO not in json.dumps(error.body)
    assert _credentials(client, vault) == before


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"limit": "0"}, ["limit"]),
        ({"limit": "101"}, ["limit"]),
        ({"limit": "x"}, ["limit"]),
        ({"page": "not a cursor"}, ["page"]),
        ({"include_archived": "maybe"}, ["include_archived"]),
    ],
)
def test_list_params_refused(
    server: ServerProcess, vault: str, params: dict[str, str], named: list[str]
) -> None:
    client = server.client()
    for path in ("/v1/vaults", f"/v1/vaults/{vault}/credentials"):
        refused(anthropic.BadRequestError, get(client, path, **params), *named)


def test_unknown_and_archived_vaults(server: ServerProcess) -> None:
    client = server.client()
    creds = client.beta.vaults.credentials
    missing = "vlt_01abcdefghjkmnpqrstvwxyz00"
    with pytest.raises(anthropic.NotFoundError):
        creds.create(missing, auth=BEARER)  # type: ignore[arg-type]
    with pytest.raises(anthropic.NotFoundError):
        list(creds.list(missing))
    with pytest.raises(anthropic.NotFoundError):
        creds.retrieve("vcrd_01abcdefghjkmnpqrstvwxyz00", vault_id=missing)
    archived = client.beta.vaults.create(display_name="old").id
    client.beta.vaults.archive(archived)
    refused(anthropic.BadRequestError, lambda: creds.create(archived, auth=BEARER), "archived")  # type: ignore[arg-type]
    cred = creds.create(client.beta.vaults.create(display_name="x").id, auth=BEARER)  # type: ignore[arg-type]
    creds.archive(cred.id, vault_id=cred.vault_id)
    refused(
        anthropic.BadRequestError,
        lambda: creds.update(
            cred.id, vault_id=cred.vault_id, auth={"type": "static_bearer", "token": "n"}
        ),
        "archived",
    )


SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=20)


def _json(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
        ),
        max_leaves=12,
    )


JSON = _json(SCALARS | st.just(ECHO))
PUBLIC_JSON = _json(SCALARS)
"""For fields we do return (display_name, metadata): a secret there would be echoed rightly."""
KINDS = st.sampled_from([BEARER, {**OAUTH, "refresh": REFRESH}, ENV])


@st.composite
def mangled(draw: st.DrawFn) -> dict[str, Any]:
    """A valid credential body with one field of `auth` (or its nesting) replaced or added."""
    auth = dict(draw(KINDS))
    key = draw(st.sampled_from([*auth, "refresh", "networking", "injection_location", "x"]))
    # A bad `type` tag is named in the error (it is no secret), so it never carries the canary.
    auth[key] = draw(PUBLIC_JSON if key == "type" else JSON)
    return {
        "auth": auth,
        **draw(st.dictionaries(st.sampled_from(["display_name", "metadata"]), PUBLIC_JSON)),
    }


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=mangled())
def test_fuzz_credential_bodies(server: ServerProcess, vault: str, body: dict[str, Any]) -> None:
    response = httpx.post(
        f"{server.url}/v1/vaults/{vault}/credentials",
        json=body,
        headers={"x-api-key": API_KEY},
        timeout=10,
    )
    assert response.status_code < 500, response.text
    assert ECHO not in response.text
    if response.status_code != 200:
        assert response.json()["type"] == "error"
        return
    created = response.json()
    again = httpx.get(
        f"{server.url}/v1/vaults/{vault}/credentials/{created['id']}",
        headers={"x-api-key": API_KEY},
        timeout=10,
    )
    assert again.json() == created
