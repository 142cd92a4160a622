"""Authenticating the brain's connections to MCP servers with a vault credential.

`VaultAuth` is an `httpx.Auth`: it adds `Authorization: Bearer …` to every request of one MCP
connection and, for an `mcp_oauth` credential with `refresh`, exchanges the refresh token at
the credential's `token_endpoint` when the access token has expired (or expires within a
minute) and once more when the server answers 401. Refreshed tokens are stored back through
`SecretResolver.store_refreshed` (sealed). Token endpoint requests go through a guarded client
(the same address rules as every server-side fetch).

Nothing here logs or formats a secret: errors name the server, the endpoint and the HTTP
status; captured response bodies are scrubbed of every secret this credential holds.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal
from urllib.parse import quote

import anyio
import httpx

from corral.ids import parse_rfc3339, rfc3339, utc_now
from corral.vault.secrets import ResolvedSecret, SecretResolver

ClientFactory = Callable[..., httpx.AsyncClient]
"""`guarded_client` bound to the server's address policy: kwargs go to httpx."""

_EXPIRY_MARGIN = timedelta(seconds=60)
_BODY_CAP = 2048
_TOKEN_TIMEOUT = 15.0
RefreshStatus = Literal["succeeded", "failed", "connect_error", "no_refresh_token"]


@dataclass(frozen=True, slots=True)
class HttpCapture:
    """An HTTP error response as `CredentialValidation` reports it (body scrubbed, capped)."""

    status_code: int
    content_type: str
    body: str
    body_truncated: bool

    def to_wire(self) -> dict[str, Any]:
        """The SDK's `RefreshHTTPResponse` shape."""
        return {
            "status_code": self.status_code,
            "content_type": self.content_type,
            "body": self.body,
            "body_truncated": self.body_truncated,
        }


@dataclass(slots=True)
class RefreshOutcome:
    """What the last refresh attempt of a connection did."""

    status: RefreshStatus
    http: HttpCapture | None = None


class AuthRejected(Exception):
    """The MCP server or the token endpoint refused the credential (message has no secret)."""


@dataclass(slots=True)
class AuthLog:
    """What a connection's requests saw, for classifying a failure afterwards."""

    rejected: HttpCapture | None = None
    """The last 401/403 from the MCP server that no refresh could cure."""
    last_error: HttpCapture | None = None
    """The last error response (any status >= 400) from the MCP server."""
    refresh: RefreshOutcome | None = None
    statuses: list[int] = field(default_factory=list)


class VaultAuth(httpx.Auth):
    """Bearer auth from a vault credential, refreshing OAuth tokens as needed."""

    def __init__(
        self,
        found: ResolvedSecret | None,
        resolver: SecretResolver,
        client_factory: ClientFactory,
    ) -> None:
        self.found = found
        self.resolver = resolver
        self.client_factory = client_factory
        self.log = AuthLog()
        self._lock = anyio.Lock()
        self._token = _current_token(found)
        self._expires = _expiry(found)
        self._refreshed = False

    @property
    def secret_values(self) -> list[str]:
        """Every secret this connection may have sent or received (for scrubbing)."""
        values = [s.reveal() for s in (self.found.secrets.values() if self.found else ())]
        return [v for v in (*values, self._token or "") if v]

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        """Add the bearer token; on a 401, refresh once (OAuth with refresh) and retry."""
        sent = await self._usable_token()
        if sent:
            request.headers["Authorization"] = f"Bearer {sent}"
        response = yield request
        if response.status_code == 401 and self.found is not None:
            fresh = await self._refresh_after_401(sent)
            if fresh is not None:
                request.headers["Authorization"] = f"Bearer {fresh}"
                response = yield request
        await self._note(response)

    async def _note(self, response: httpx.Response) -> None:
        self.log.statuses.append(response.status_code)
        if response.status_code < 400:
            return
        await response.aread()
        capture = capture_response(response, self.secret_values)
        self.log.last_error = capture
        if response.status_code in (401, 403):
            self.log.rejected = capture

    async def _usable_token(self) -> str | None:
        """The access token, refreshed first when it has expired (or is about to)."""
        async with self._lock:
            expired = self._expires is not None and self._expires - _EXPIRY_MARGIN <= utc_now()
            if expired and _can_refresh(self.found) and not self._refreshed:
                await self._refresh()
            return self._token

    async def _refresh_after_401(self, sent: str | None) -> str | None:
        """A new token after a 401, or None when there is none to try."""
        async with self._lock:
            if self._token != sent:
                return self._token  # another request of this connection refreshed meanwhile
            if not _can_refresh(self.found):
                if self.found is not None and self.found.auth.get("type") == "mcp_oauth":
                    self.log.refresh = RefreshOutcome("no_refresh_token")
                return None
            if self._refreshed:
                return None  # one refresh per connection: a fresh token refused is final
            await self._refresh()
            return self._token

    async def _refresh(self) -> None:
        """Exchange the refresh token (raises AuthRejected when that fails)."""
        assert self.found is not None
        self._refreshed = True
        refresh = dict(self.found.auth.get("refresh") or {})
        secrets = {k: v.reveal() for k, v in self.found.secrets.items()}
        endpoint = str(refresh.get("token_endpoint"))
        data, headers = token_request(refresh, secrets)
        try:
            async with self.client_factory(timeout=_TOKEN_TIMEOUT) as client:
                response = await client.post(endpoint, data=data, headers=headers)
        except httpx.HTTPError as exc:
            self.log.refresh = RefreshOutcome("connect_error")
            raise AuthRejected(
                f"the token endpoint {endpoint} could not be reached ({type(exc).__name__})"
            ) from None
        tokens = _token_response(response)
        if tokens is None:
            capture = capture_response(response, [*self.secret_values, *_response_tokens(response)])
            self.log.refresh = RefreshOutcome("failed", capture)
            raise AuthRejected(
                f"the token endpoint {endpoint} refused the refresh (HTTP {response.status_code})"
            )
        self.log.refresh = RefreshOutcome("succeeded")
        await self._keep(tokens)

    async def _keep(self, tokens: dict[str, Any]) -> None:
        assert self.found is not None
        self._token = str(tokens["access_token"])
        stored = {"access_token": self._token}
        if isinstance(tokens.get("refresh_token"), str) and tokens["refresh_token"]:
            stored["refresh_token"] = tokens["refresh_token"]
        expires_in = tokens.get("expires_in")
        self._expires = None
        expires_at = None
        if isinstance(expires_in, int | float) and expires_in > 0:
            self._expires = utc_now() + timedelta(seconds=float(expires_in))
            expires_at = rfc3339(self._expires)
        # LookupError: the credential was archived meanwhile; the token serves this call only.
        with contextlib.suppress(LookupError):
            await self.resolver.store_refreshed(self.found, stored, expires_at=expires_at)


def capture_response(response: httpx.Response, secrets: list[str]) -> HttpCapture:
    """An error response for a report: the body capped at 2 KiB, every secret replaced."""
    try:
        text = response.text
    except (httpx.ResponseNotRead, UnicodeDecodeError):
        text = ""
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret:
            text = text.replace(secret, "[redacted]")
    return HttpCapture(
        status_code=response.status_code,
        content_type=response.headers.get("content-type", ""),
        body=text[:_BODY_CAP],
        body_truncated=len(text) > _BODY_CAP,
    )


def _current_token(found: ResolvedSecret | None) -> str | None:
    if found is None:
        return None
    secret = found.secrets.get("access_token") or found.secrets.get("token")
    return secret.reveal() if secret is not None else None


def _expiry(found: ResolvedSecret | None) -> Any:
    raw = found.auth.get("expires_at") if found is not None else None
    if not isinstance(raw, str):
        return None
    try:
        return parse_rfc3339(raw)
    except ValueError:
        return None


def _can_refresh(found: ResolvedSecret | None) -> bool:
    return (
        found is not None
        and found.auth.get("type") == "mcp_oauth"
        and bool(found.auth.get("refresh"))
        and "refresh_token" in found.secrets
    )


def token_request(
    refresh: dict[str, Any], secrets: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Form and headers of a refresh_token grant, client authenticated per the credential's
    `token_endpoint_auth` (RFC 6749 §2.3.1: basic encodes id and secret form-urlencoded)."""
    data = {"grant_type": "refresh_token", "refresh_token": secrets["refresh_token"]}
    for key in ("scope", "resource"):
        if refresh.get(key):
            data[key] = str(refresh[key])
    headers = {"Accept": "application/json"}
    client_id = str(refresh.get("client_id", ""))
    method = str((refresh.get("token_endpoint_auth") or {}).get("type", "none"))
    secret = secrets.get("client_secret", "")
    if method == "client_secret_basic":
        pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        data["client_id"] = client_id
        if method == "client_secret_post":
            data["client_secret"] = secret
    return data, headers


def _token_response(response: httpx.Response) -> dict[str, Any] | None:
    """The token endpoint's JSON when it granted an access token, else None."""
    if response.status_code != 200:
        return None
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("access_token"), str):
        return None
    return body


def _response_tokens(response: httpx.Response) -> list[str]:
    """Token-looking values in a refused token response (scrubbed from reports too)."""
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return []
    if not isinstance(body, dict):
        return []
    return [str(v) for k, v in body.items() if "token" in k and isinstance(v, str)]
