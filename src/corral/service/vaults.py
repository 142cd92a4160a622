"""Vaults and their credentials over the API: CRUD, archive, delete, pagination.

Responses are built from public fields only; secrets go straight from the request into
`VaultSecrets.seal` and are never returned, logged or put in an error message.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from corral.errors import ApiError, BadRequest, NotFound
from corral.ids import new_id, now_rfc3339
from corral.mcp.client import McpClient
from corral.service.common import apply_metadata_patch, page_envelope
from corral.service.credential_auth import create_auth, update_auth
from corral.service.mcp_validate import validate_credential
from corral.store.base import Page, Resource
from corral.vault.crypto import VaultKeyError
from corral.vault.secrets import (
    SEALED,
    VAULT_KIND,
    VaultSecrets,
    all_rows,
    credential_kind,
    public_body,
)
from corral.wire.vaults import CredentialCreate, CredentialUpdate, VaultCreate, VaultUpdate


class VaultService:
    """CRUD for vaults and credentials; sealing is `VaultSecrets`' job."""

    def __init__(self, secrets: VaultSecrets, *, mcp: McpClient | None = None) -> None:
        self.secrets = secrets
        self.store = secrets.store
        self.mcp = mcp
        """Probes MCP servers for `validate_credential` (None: validation is refused)."""

    # ---- vaults ------------------------------------------------------------------------

    async def create(self, req: VaultCreate) -> dict[str, Any]:
        """A new, empty vault."""
        now = now_rfc3339()
        body: dict[str, Any] = {
            "id": new_id("vlt"),
            "type": "vault",
            "display_name": req.display_name,
            "metadata": dict(req.metadata or {}),
            "created_at": now,
            "updated_at": now,
            "archived_at": None,
        }
        await self.store.insert_resource(
            Resource(kind=VAULT_KIND, id=body["id"], body=body, created_at=now)
        )
        return body

    async def get(self, vault_id: str) -> dict[str, Any]:
        """The vault."""
        return (await self._vault(vault_id)).body

    async def update(self, vault_id: str, req: VaultUpdate) -> dict[str, Any]:
        """Rename and patch metadata."""
        row = await self._vault(vault_id)
        body = dict(row.body)
        if req.display_name is not None:
            body["display_name"] = req.display_name
        if req.metadata is not None:
            body["metadata"] = apply_metadata_patch(body["metadata"], req.metadata)
        body["updated_at"] = now_rfc3339()
        await self._save(row, body)
        return body

    async def archive(self, vault_id: str) -> dict[str, Any]:
        """Sessions can no longer name it, and its credentials are no longer resolved."""
        row = await self._vault(vault_id)
        body = dict(row.body)
        if body["archived_at"] is None:
            body["archived_at"] = body["updated_at"] = now_rfc3339()
            await self._save(row, body)
        return body

    async def delete(self, vault_id: str) -> dict[str, Any]:
        """Remove the vault and every credential in it (their sealed secrets with them)."""
        await self._vault(vault_id)
        for row in await all_rows(self.store, credential_kind(vault_id), include_archived=True):
            await self.store.delete_resource(row.kind, row.id)
        if not await self.store.delete_resource(VAULT_KIND, vault_id):
            raise _vault_not_found(vault_id)
        return {"id": vault_id, "type": "vault_deleted"}

    async def list(self, page: Page) -> dict[str, Any]:
        """A page of vaults."""
        rows = await self.store.list_resources(VAULT_KIND, page)
        return page_envelope(rows, page.limit, lambda r: r.body, lambda r: r.id)

    # ---- credentials -------------------------------------------------------------------

    async def create_credential(self, vault_id: str, req: CredentialCreate) -> dict[str, Any]:
        """A credential whose secrets are sealed before anything is stored."""
        if (await self._vault(vault_id)).archived_at is not None:
            raise BadRequest(f"vault {vault_id} is archived", error_code="vault_archived")
        public, secrets = create_auth(req.auth)
        now = now_rfc3339()
        credential_id = new_id("vcrd")
        body: dict[str, Any] = {
            "id": credential_id,
            "type": "vault_credential",
            "vault_id": vault_id,
            "display_name": req.display_name,
            "metadata": dict(req.metadata or {}),
            "auth": public,
            "created_at": now,
            "updated_at": now,
            "archived_at": None,
            SEALED: self.secrets.seal(vault_id, credential_id, secrets),
        }
        await self.store.insert_resource(
            Resource(kind=credential_kind(vault_id), id=credential_id, body=body, created_at=now)
        )
        return public_body(body)

    async def get_credential(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        """The credential, without secrets."""
        return public_body((await self._credential(vault_id, credential_id)).body)

    async def update_credential(
        self, vault_id: str, credential_id: str, req: CredentialUpdate
    ) -> dict[str, Any]:
        """Rename, patch metadata, replace secrets or settings; the type never changes."""
        row = await self._credential(vault_id, credential_id)
        body = dict(row.body)
        if req.display_name is not None:
            body["display_name"] = req.display_name
        if req.metadata is not None:
            body["metadata"] = apply_metadata_patch(body["metadata"], req.metadata)
        if req.auth is not None:
            if row.archived_at is not None:
                raise BadRequest(
                    f"credential {credential_id} is archived; its secrets cannot be replaced",
                    error_code="credential_archived",
                )
            current = await self._open(row)
            body["auth"], secrets = update_auth(body["auth"], current, req.auth)
            body[SEALED] = self.secrets.seal(vault_id, credential_id, secrets)
        body["updated_at"] = now_rfc3339()
        await self._save(row, body)
        return public_body(body)

    async def archive_credential(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        """Stop resolving it; its secrets are dropped, since nothing may use them again."""
        row = await self._credential(vault_id, credential_id)
        body = dict(row.body)
        if body["archived_at"] is None:
            body["archived_at"] = body["updated_at"] = now_rfc3339()
            body[SEALED] = self.secrets.seal(vault_id, credential_id, {})
            await self._save(row, body)
        return public_body(body)

    async def delete_credential(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        """Remove it."""
        await self._vault(vault_id)
        if not await self.store.delete_resource(credential_kind(vault_id), credential_id):
            raise _credential_not_found(credential_id)
        return {"id": credential_id, "type": "vault_credential_deleted"}

    async def list_credentials(self, vault_id: str, page: Page) -> dict[str, Any]:
        """A page of one vault's credentials."""
        await self._vault(vault_id)
        rows = await self.store.list_resources(credential_kind(vault_id), page)
        return page_envelope(rows, page.limit, lambda r: public_body(r.body), lambda r: r.id)

    async def validate_credential(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        """`mcp_oauth_validate`: probe the credential's MCP server with it (see
        `service.mcp_validate`)."""
        row = await self._credential(vault_id, credential_id)
        if self.mcp is None:
            raise BadRequest("this server cannot probe MCP servers", error_code="not_supported")
        try:
            return await validate_credential(self.secrets, self.mcp, row)
        except VaultKeyError as exc:
            raise ApiError(f"cannot open credential {row.id}: {exc}") from exc

    # ---- helpers -----------------------------------------------------------------------

    async def _open(self, row: Resource) -> dict[str, str]:
        try:
            return await self.secrets.open(row)
        except VaultKeyError as exc:
            raise ApiError(f"cannot open credential {row.id}: {exc}") from exc

    async def _vault(self, vault_id: str) -> Resource:
        row = await self.store.get_resource(VAULT_KIND, vault_id)
        if row is None:
            raise _vault_not_found(vault_id)
        return row

    async def _credential(self, vault_id: str, credential_id: str) -> Resource:
        await self._vault(vault_id)
        row = await self.store.get_resource(credential_kind(vault_id), credential_id)
        if row is None:
            raise _credential_not_found(credential_id)
        return row

    async def _save(self, row: Resource, body: dict[str, Any]) -> None:
        await self.store.replace_resource(
            replace(row, body=body, archived_at=body.get("archived_at"))
        )


def _vault_not_found(vault_id: str) -> NotFound:
    return NotFound(f"vault {vault_id} not found", error_code="vault_not_found")


def _credential_not_found(credential_id: str) -> NotFound:
    return NotFound(f"credential {credential_id} not found", error_code="credential_not_found")
