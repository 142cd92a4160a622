"""Vault and credential request bodies, shaped like the SDK's params (`types/beta/vaults`).

Secret fields are accepted here and nowhere rendered; this module only validates shapes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from corral.wire.common import Metadata, MetadataPatch, Strict

Secret = Annotated[str, Field(min_length=1, max_length=16384)]
Url = Annotated[str, Field(min_length=1, max_length=2048, pattern=r"^https?://[^\s/?#]+[^\s]*$")]
Name = Annotated[str, Field(min_length=1, max_length=255)]
# A bare hostname, IPv4 address or `*.` wildcard: no scheme, port, path or IPv6.
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = rf"^(\*\.)?{_LABEL}(\.{_LABEL})*$"
Host = Annotated[str, Field(max_length=253, pattern=_HOST)]
EnvName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class VaultCreate(Strict):
    """POST /v1/vaults."""

    display_name: Name
    metadata: Metadata | None = None


class VaultUpdate(Strict):
    """POST /v1/vaults/{vault_id}."""

    display_name: Name | None = None
    metadata: MetadataPatch | None = None


class NoneAuth(Strict):
    """The token endpoint needs no client authentication."""

    type: Literal["none"]


class BasicAuth(Strict):
    """Client secret sent with HTTP Basic."""

    type: Literal["client_secret_basic"]
    client_secret: Secret


class PostAuth(Strict):
    """Client secret sent in the POST body."""

    type: Literal["client_secret_post"]
    client_secret: Secret


TokenEndpointAuth = Annotated[NoneAuth | BasicAuth | PostAuth, Field(discriminator="type")]


class RefreshCreate(Strict):
    """`mcp_oauth.refresh` on create."""

    client_id: Annotated[str, Field(min_length=1, max_length=1024)]
    refresh_token: Secret
    token_endpoint: Url
    token_endpoint_auth: TokenEndpointAuth
    resource: Annotated[str, Field(max_length=2048)] | None = None
    scope: Annotated[str, Field(max_length=2048)] | None = None


class McpOAuthCreate(Strict):
    """An OAuth credential for an MCP server."""

    type: Literal["mcp_oauth"]
    mcp_server_url: Url
    access_token: Secret
    expires_at: datetime | None = None
    refresh: RefreshCreate | None = None


class StaticBearerCreate(Strict):
    """A static bearer token for an MCP server."""

    type: Literal["static_bearer"]
    mcp_server_url: Url
    token: Secret


class Unrestricted(Strict):
    """Substitute on any host the environment lets the sandbox reach."""

    type: Literal["unrestricted"]


class Limited(Strict):
    """Substitute only on requests to these hosts."""

    type: Literal["limited"]
    allowed_hosts: Annotated[list[Host], Field(min_length=1, max_length=16)]


Networking = Annotated[Unrestricted | Limited, Field(discriminator="type")]


class InjectionLocation(Strict):
    """Where in an outbound request the placeholder is replaced."""

    header: bool | None = None
    body: bool | None = None


class EnvironmentVariableCreate(Strict):
    """A secret the sandbox sees only as a placeholder in an environment variable."""

    type: Literal["environment_variable"]
    secret_name: EnvName
    secret_value: Secret
    networking: Networking
    injection_location: InjectionLocation | None = None


AuthCreate = Annotated[
    McpOAuthCreate | StaticBearerCreate | EnvironmentVariableCreate, Field(discriminator="type")
]


class CredentialCreate(Strict):
    """POST /v1/vaults/{vault_id}/credentials."""

    auth: AuthCreate
    display_name: Annotated[str, Field(max_length=255)] | None = None
    metadata: Metadata | None = None


class SecretUpdateAuth(Strict):
    """A new client secret; the credential keeps its current endpoint auth method."""

    type: Literal["client_secret_basic", "client_secret_post"]
    client_secret: Secret | None = None


class RefreshUpdate(Strict):
    """`mcp_oauth.refresh` on update (`client_id` and `token_endpoint` are immutable)."""

    refresh_token: Secret | None = None
    scope: Annotated[str, Field(max_length=2048)] | None = None
    token_endpoint_auth: SecretUpdateAuth | None = None


class McpOAuthUpdate(Strict):
    """Update of an OAuth credential (`mcp_server_url` is immutable)."""

    type: Literal["mcp_oauth"]
    access_token: Secret | None = None
    expires_at: datetime | None = None
    refresh: RefreshUpdate | None = None


class StaticBearerUpdate(Strict):
    """Update of a static bearer credential (`mcp_server_url` is immutable)."""

    type: Literal["static_bearer"]
    token: Secret | None = None


class EnvironmentVariableUpdate(Strict):
    """Update of an environment variable credential (`secret_name` is immutable)."""

    type: Literal["environment_variable"]
    secret_value: Secret | None = None
    networking: Networking | None = None
    injection_location: InjectionLocation | None = None


AuthUpdate = Annotated[
    McpOAuthUpdate | StaticBearerUpdate | EnvironmentVariableUpdate, Field(discriminator="type")
]


class CredentialUpdate(Strict):
    """POST /v1/vaults/{vault_id}/credentials/{credential_id}."""

    auth: AuthUpdate | None = None
    display_name: Name | None = None
    metadata: MetadataPatch | None = None
