"""`vaults.credentials.mcp_oauth_validate`: probe a credential's MCP server with it.

The probe is what a session would do: connect (streamable HTTP, or HTTP+SSE), `initialize`,
`tools/list`, refreshing the access token first if it has expired and once more on a 401.
The verdict follows the SDK's `CredentialValidation`: `valid` when the probe succeeded,
`invalid` when the server or the token endpoint refused the credential, `unknown` when the
server could not be reached or failed otherwise (nothing was learnt about the credential).
A refreshed token is stored, as a session would store it.
"""

from __future__ import annotations

from typing import Any

from corral.errors import BadRequest
from corral.ids import now_rfc3339
from corral.mcp.client import McpClient, McpFailure, ServerRef
from corral.store.base import Resource
from corral.vault.secrets import SecretMatch, VaultSecrets


async def validate_credential(
    secrets: VaultSecrets, client: McpClient, row: Resource
) -> dict[str, Any]:
    """The `vault_credential_validation` object for a stored credential row."""
    auth = row.body["auth"]
    vault_id, credential_id = str(row.body["vault_id"]), row.id
    if auth.get("type") != "mcp_oauth":
        raise BadRequest(
            f"credential {credential_id} is a {auth.get('type')} credential; only mcp_oauth "
            "credentials can be validated",
            error_code="invalid_credential_type",
        )
    url = str(auth["mcp_server_url"])
    matches = await secrets.resolve_all([vault_id], SecretMatch(mcp_server_url=url))
    found = next((m for m in matches if m.credential_id == credential_id), None)
    if found is None:
        raise BadRequest(
            f"credential {credential_id} is archived, or its vault is: nothing to validate",
            error_code="credential_archived",
        )
    report: dict[str, Any] = {
        "type": "vault_credential_validation",
        "credential_id": credential_id,
        "vault_id": vault_id,
        "has_refresh_token": "refresh_token" in found.secrets,
        "status": "valid",
        "mcp_probe": None,
        "refresh": None,
        "validated_at": now_rfc3339(),
    }
    server = ServerRef(str(row.body.get("display_name") or credential_id), url)
    try:
        log = await client.probe(server, found)
    except McpFailure as failure:
        report["status"] = "invalid" if failure.kind == "authentication" else "unknown"
        http = failure.http.to_wire() if failure.http else None
        report["mcp_probe"] = {"method": failure.method, "http_response": http}
        report["refresh"] = _refresh(failure.refresh)
        return report
    report["refresh"] = _refresh(log.refresh)
    return report


def _refresh(outcome: Any) -> dict[str, Any] | None:
    if outcome is None:
        return None
    http = outcome.http.to_wire() if outcome.http is not None else None
    return {"status": outcome.status, "http_response": http}
