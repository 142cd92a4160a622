"""Credential `auth`: split a request into the public form we return and the secrets we seal,
and merge an update into both. Pure: no store, no cipher, no logging of any value.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from corral.errors import BadRequest
from corral.ids import rfc3339, utc_now
from corral.wire.vaults import (
    AuthCreate,
    AuthUpdate,
    EnvironmentVariableCreate,
    EnvironmentVariableUpdate,
    InjectionLocation,
    Limited,
    McpOAuthCreate,
    McpOAuthUpdate,
    RefreshCreate,
    RefreshUpdate,
    StaticBearerCreate,
    Unrestricted,
)

Split = tuple[dict[str, Any], dict[str, str]]
"""(public auth, secrets by wire field name)."""


def create_auth(auth: AuthCreate) -> Split:
    """The stored form of a new credential's `auth`."""
    if isinstance(auth, StaticBearerCreate):
        return {"type": "static_bearer", "mcp_server_url": auth.mcp_server_url}, {
            "token": auth.token
        }
    if isinstance(auth, McpOAuthCreate):
        return _create_oauth(auth)
    return _create_env(auth)


def _create_oauth(auth: McpOAuthCreate) -> Split:
    public: dict[str, Any] = {"type": "mcp_oauth", "mcp_server_url": auth.mcp_server_url}
    secrets = {"access_token": auth.access_token}
    if auth.expires_at is not None:
        public["expires_at"] = _future("auth.expires_at", auth.expires_at)
    if auth.refresh is not None:
        public["refresh"], refresh_secrets = _create_refresh(auth.refresh)
        secrets.update(refresh_secrets)
    return public, secrets


def _create_refresh(refresh: RefreshCreate) -> Split:
    method = refresh.token_endpoint_auth
    public: dict[str, Any] = {
        "client_id": refresh.client_id,
        "token_endpoint": refresh.token_endpoint,
        "token_endpoint_auth": {"type": method.type},
        "resource": refresh.resource,
        "scope": refresh.scope or None,
    }
    secrets = {"refresh_token": refresh.refresh_token}
    if method.type != "none":
        secrets["client_secret"] = method.client_secret
    return public, secrets


def _create_env(auth: EnvironmentVariableCreate) -> Split:
    public = {
        "type": "environment_variable",
        "secret_name": auth.secret_name,
        "networking": _networking(auth.networking),
        "injection_location": _injection({"header": True, "body": False}, auth.injection_location),
    }
    return public, {"secret_value": auth.secret_value}


def update_auth(public: dict[str, Any], secrets: dict[str, str], auth: AuthUpdate) -> Split:
    """Apply an update; `type` (and `secret_name`, `mcp_server_url`, `client_id`) never change.

    Raises:
        BadRequest: the type differs from the credential's, or a field cannot apply to it.
    """
    if auth.type != public["type"]:
        raise BadRequest(
            f"auth.type: a credential's type cannot change (it is {public['type']})",
            error_code="invalid_credential_type_change",
        )
    public, secrets = dict(public), dict(secrets)
    if isinstance(auth, McpOAuthUpdate):
        _update_oauth(public, secrets, auth)
    elif isinstance(auth, EnvironmentVariableUpdate):
        _update_env(public, secrets, auth)
    elif auth.token is not None:
        secrets["token"] = auth.token
    return public, secrets


def _update_oauth(public: dict[str, Any], secrets: dict[str, str], auth: McpOAuthUpdate) -> None:
    if auth.access_token is not None:
        secrets["access_token"] = auth.access_token
    if "expires_at" in auth.model_fields_set:
        if auth.expires_at is None:
            public.pop("expires_at", None)
        else:
            public["expires_at"] = _future("auth.expires_at", auth.expires_at)
    if auth.refresh is not None:
        if public.get("refresh") is None:
            raise BadRequest("auth.refresh: this credential was created without refresh")
        public["refresh"] = _update_refresh(dict(public["refresh"]), secrets, auth.refresh)


def _update_refresh(
    refresh: dict[str, Any], secrets: dict[str, str], update: RefreshUpdate
) -> dict[str, Any]:
    if update.refresh_token is not None:
        secrets["refresh_token"] = update.refresh_token
    if update.scope is not None:
        refresh["scope"] = update.scope or None  # "" clears the scope
    method = update.token_endpoint_auth
    if method is not None:
        if refresh["token_endpoint_auth"]["type"] == "none":
            raise BadRequest(
                "auth.refresh.token_endpoint_auth: the token endpoint auth method cannot "
                "change (this credential uses none)"
            )
        # The stored method is kept even when the other secret-bearing type is sent.
        if method.client_secret is not None:
            secrets["client_secret"] = method.client_secret
    return refresh


def _update_env(
    public: dict[str, Any], secrets: dict[str, str], auth: EnvironmentVariableUpdate
) -> None:
    if auth.secret_value is not None:
        secrets["secret_value"] = auth.secret_value
    if auth.networking is not None:
        public["networking"] = _networking(auth.networking)
    if auth.injection_location is not None:
        public["injection_location"] = _injection(
            public["injection_location"], auth.injection_location
        )


def _networking(value: Unrestricted | Limited) -> dict[str, Any]:
    if isinstance(value, Limited):
        return {"type": "limited", "allowed_hosts": [h.lower() for h in value.allowed_hosts]}
    return {"type": "unrestricted"}


def _injection(current: dict[str, bool], sent: InjectionLocation | None) -> dict[str, bool]:
    merged = dict(current)
    if sent is not None:
        merged.update({k: v for k, v in sent.model_dump().items() if v is not None})
    if not (merged["header"] or merged["body"]):
        raise BadRequest("auth.injection_location: at least one of header or body must be true")
    return merged


def _future(field: str, moment: datetime) -> str:
    if moment.tzinfo is None:
        raise BadRequest(f"{field}: must include a timezone (RFC 3339)")
    if moment <= utc_now():
        raise BadRequest(f"{field}: must be in the future")
    try:
        return rfc3339(moment)
    except (OverflowError, ValueError) as exc:
        raise BadRequest(f"{field}: out of range") from exc
