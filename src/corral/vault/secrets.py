"""The seam other parts use a credential through: `resolve_secret(vault_ids, match)`.

Rows live in the generic resource store: vaults as kind `vault`, credentials as kind
`vault_credential:<vault_id>` (so one vault's credentials list in id order on the existing
index), each credential's secrets sealed in its body's `sealed` field. Plaintexts leave this
module only inside `Secret` values, whose repr is redacted; nothing here logs them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from corral.store.base import Page, Resource, ResourceStore
from corral.vault.crypto import Keyring

VAULT_KIND = "vault"
SEALED = "sealed"
CredentialType = Literal["mcp_oauth", "static_bearer", "environment_variable"]


def credential_kind(vault_id: str) -> str:
    """The resource kind one vault's credentials are stored under."""
    return f"vault_credential:{vault_id}"


def bound_to(vault_id: str, credential_id: str) -> str:
    """What a credential's sealed token is bound to (a token moved elsewhere will not open)."""
    return f"{vault_id}/{credential_id}"


def public_body(body: dict[str, Any]) -> dict[str, Any]:
    """A stored credential body as the API returns it: without the sealed secrets."""
    return {k: v for k, v in body.items() if k != SEALED}


class Secret:
    """A plaintext secret; `str()`/`repr()` are redacted so it cannot leak into a log line."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The plaintext, for the one place that must send it (an auth header, egress)."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True, slots=True, kw_only=True)
class SecretMatch:
    """Which credential a caller wants; unset fields match anything."""

    type: CredentialType | None = None
    mcp_server_url: str | None = None
    secret_name: str | None = None

    def accepts(self, auth: dict[str, Any]) -> bool:
        """Whether a credential's public `auth` fits."""
        return (
            (self.type is None or auth.get("type") == self.type)
            and (self.mcp_server_url is None or auth.get("mcp_server_url") == self.mcp_server_url)
            and (self.secret_name is None or auth.get("secret_name") == self.secret_name)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedSecret:
    """A usable credential: its public `auth` and its secrets by wire field name
    (`token`, `access_token`, `refresh_token`, `client_secret`, `secret_value`)."""

    vault_id: str
    credential_id: str
    auth: dict[str, Any]
    secrets: dict[str, Secret] = field(repr=False)


class SecretResolver(Protocol):
    """What MCP clients and the egress layer depend on, never the store or the cipher."""

    async def resolve_secret(
        self, vault_ids: Sequence[str], match: SecretMatch
    ) -> ResolvedSecret | None:
        """The first active credential fitting `match`, in `vault_ids` order then id order
        (creation order, to the millisecond); None if there is none. Archived or deleted
        vaults and credentials never match.

        Raises:
            VaultKeyError: the credential was sealed under a key that is not configured.
        """
        ...

    async def resolve_all(
        self, vault_ids: Sequence[str], match: SecretMatch
    ) -> list[ResolvedSecret]:
        """Every active credential fitting `match`, in the same order."""
        ...

    async def store_refreshed(
        self, found: ResolvedSecret, secrets: dict[str, str], *, expires_at: str | None = None
    ) -> None:
        """Keep tokens an OAuth refresh returned (merged over the stored secrets, re-sealed)
        and the new expiry; the credential's other fields are untouched.

        Raises:
            LookupError: the credential was deleted or archived meanwhile.
        """
        ...


class VaultSecrets:
    """Seals, opens and resolves credential secrets over a `ResourceStore`."""

    def __init__(self, store: ResourceStore, keyring: Keyring) -> None:
        self.store = store
        self.keyring = keyring

    def seal(self, vault_id: str, credential_id: str, values: dict[str, str]) -> str:
        """Encrypt a credential's secrets under the primary key."""
        return self.keyring.seal(values, bound_to(vault_id, credential_id))

    async def open(self, row: Resource) -> dict[str, str]:
        """A credential row's secrets; re-seals the row under the primary key if an older key
        sealed it (so rotation completes as credentials are used)."""
        vault_id = str(row.body["vault_id"])
        opened = self.keyring.open(str(row.body[SEALED]), bound_to(vault_id, row.id))
        if opened.stale:
            body = {**row.body, SEALED: self.seal(vault_id, row.id, opened.values)}
            await self.store.replace_resource(replace(row, body=body))
        return opened.values

    async def resolve_secret(
        self, vault_ids: Sequence[str], match: SecretMatch
    ) -> ResolvedSecret | None:
        """See `SecretResolver.resolve_secret`."""
        async for row in self._matching(vault_ids, match):
            return await self._resolved(row)
        return None

    async def resolve_all(
        self, vault_ids: Sequence[str], match: SecretMatch
    ) -> list[ResolvedSecret]:
        """See `SecretResolver.resolve_all`."""
        return [await self._resolved(row) async for row in self._matching(vault_ids, match)]

    async def store_refreshed(
        self, found: ResolvedSecret, secrets: dict[str, str], *, expires_at: str | None = None
    ) -> None:
        """See `SecretResolver.store_refreshed`."""
        row = await self.store.get_resource(credential_kind(found.vault_id), found.credential_id)
        if row is None or row.archived_at is not None:
            raise LookupError(f"credential {found.credential_id} is gone")
        merged = {**await self.open(row), **secrets}
        auth = dict(row.body["auth"])
        if expires_at is not None:
            auth["expires_at"] = expires_at
        body = {
            **row.body,
            "auth": auth,
            SEALED: self.seal(found.vault_id, row.id, merged),
        }
        await self.store.replace_resource(replace(row, body=body))

    async def rekey(self) -> int:
        """Re-seal every credential sealed under a non-primary key; returns how many."""
        count = 0
        for vault in await all_rows(self.store, VAULT_KIND, include_archived=True):
            for row in await all_rows(self.store, credential_kind(vault.id), include_archived=True):
                if not str(row.body[SEALED]).startswith(f"v1.{self.keyring.primary_id}."):
                    await self.open(row)
                    count += 1
        return count

    async def _matching(
        self, vault_ids: Sequence[str], match: SecretMatch
    ) -> AsyncIterator[Resource]:
        for vault_id in dict.fromkeys(vault_ids):
            vault = await self.store.get_resource(VAULT_KIND, vault_id)
            if vault is None or vault.archived_at is not None:
                continue
            for row in await all_rows(
                self.store, credential_kind(vault_id), include_archived=False
            ):
                if match.accepts(row.body["auth"]):
                    yield row

    async def _resolved(self, row: Resource) -> ResolvedSecret:
        values = await self.open(row)
        return ResolvedSecret(
            vault_id=str(row.body["vault_id"]),
            credential_id=row.id,
            auth=dict(row.body["auth"]),
            secrets={k: Secret(v) for k, v in values.items()},
        )


async def all_rows(store: ResourceStore, kind: str, *, include_archived: bool) -> list[Resource]:
    """Every row of a kind, walking pages (vaults and their credentials are few)."""
    rows: list[Resource] = []
    after: str | None = None
    while True:
        page = await store.list_resources(
            kind, Page(limit=100, after_id=after, include_archived=include_archived)
        )
        rows.extend(page[:100])
        if len(page) <= 100:
            return rows
        after = page[99].id
