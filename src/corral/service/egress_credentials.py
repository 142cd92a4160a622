"""A session's `environment_variable` credentials, as its sandbox and its brain need them.

The sandbox gets `secret_name=<placeholder>` in its environment; the egress proxy gets the
placeholder -> secret pairs, hosts and injection locations as plain data
(`hands.base.Interception`) together with the environment's CA (`vault.ca`). A placeholder
is `corral-placeholder-<32 hex>`: a keyed hash of session and credential (`Keyring.mac`), so
it is the same in every sandbox of the session, differs between sessions and credentials,
and tells nothing about the secret. When two credentials share a `secret_name`, the first
(vault order, then creation order) wins.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from corral.hands.base import Hidden, Injection, Interception
from corral.store.base import Resource, SessionRow
from corral.vault.ca import load_or_create_ca
from corral.vault.secrets import (
    SEALED,
    VAULT_KIND,
    ResolvedSecret,
    SecretMatch,
    VaultSecrets,
    all_rows,
    credential_kind,
)

PLACEHOLDER_PREFIX = "corral-placeholder-"
_ENV_VARS = SecretMatch(type="environment_variable")


class EgressCredentials:
    """Builds sandbox credential data and checks credential hosts against networking."""

    def __init__(self, secrets: VaultSecrets, data_dir: Path) -> None:
        self._secrets = secrets
        self._data_dir = data_dir

    def placeholder(self, session_id: str, credential_id: str) -> str:
        """What the sandbox sees instead of the credential's secret."""
        digest = self._secrets.keyring.mac(f"placeholder/{session_id}/{credential_id}")
        return PLACEHOLDER_PREFIX + digest[:32]

    async def for_sandbox(
        self,
        session_id: str,
        vault_ids: Sequence[str],
        environment_id: str,
        networking: dict[str, Any],
    ) -> tuple[dict[str, str], Interception | None]:
        """(environment variables, interception) for the session's sandbox; no interception
        when there is no credential or the sandbox has no network."""
        found = await self._secrets.resolve_all(vault_ids, _ENV_VARS) if vault_ids else []
        env: dict[str, str] = {}
        injections = []
        for cred in found:
            name = str(cred.auth["secret_name"])
            if name in env or "secret_value" not in cred.secrets:
                continue
            env[name] = self.placeholder(session_id, cred.credential_id)
            injections.append(_injection(cred, env[name]))
        if not injections or networking.get("type") == "none":
            return env, None
        ca = await anyio.to_thread.run_sync(
            load_or_create_ca, self._data_dir, self._secrets.keyring, environment_id
        )
        return env, Interception(
            ca_cert_pem=ca.cert_pem,
            ca_key_pem=Hidden(ca.key_pem.reveal().encode()),
            injections=tuple(injections),
        )

    async def _rows(self, vault_ids: Sequence[str]) -> list[Resource]:
        """The session's active `environment_variable` credential rows, in resolve order,
        without opening a secret."""
        found: list[Resource] = []
        store = self._secrets.store
        for vault_id in dict.fromkeys(vault_ids):
            vault = await store.get_resource(VAULT_KIND, vault_id)
            if vault is None or vault.archived_at is not None:
                continue
            rows = await all_rows(store, credential_kind(vault_id), include_archived=False)
            found += [r for r in rows if _ENV_VARS.accepts(r.body.get("auth") or {})]
        return found

    async def fingerprint(self, vault_ids: Sequence[str]) -> str:
        """A digest of the state of the `environment_variable` credentials these vaults give
        a session (which are active, and their sealed values), opening no secret: when it
        changes, the session's sandbox is re-made, so an archived or updated credential stops
        being substituted as its old self."""
        state = [
            [r.body.get("vault_id"), r.id, r.body.get(SEALED), r.body.get("auth")]
            for r in await self._rows(vault_ids)
        ]
        encoded = json.dumps(state, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(encoded.encode()).hexdigest()

    async def check(self, row: SessionRow) -> list[dict[str, Any]]:
        """`unreachable` for a session, against its environment's networking now (a deleted
        environment grants none, as its sandbox would)."""
        vault_ids = row.body.get("vault_ids") or []
        if not vault_ids:
            return []
        env = await self._secrets.store.get_resource("environment", row.environment_id)
        config = (env.body.get("config") or {}) if env else {"networking": {"type": "none"}}
        return await self.unreachable(vault_ids, config.get("networking") or {})

    async def unreachable(
        self, vault_ids: Sequence[str], networking: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """A `credential_host_unreachable_error` body (without `retry_status`) per credential
        naming hosts the environment's networking does not let the sandbox reach."""
        errors = []
        for row in await self._rows(vault_ids):
            auth = row.body.get("auth") or {}
            blocked = blocked_hosts(auth.get("networking") or {}, networking)
            if blocked:
                kind = networking.get("type", "unrestricted")
                errors.append(
                    {
                        "type": "credential_host_unreachable_error",
                        "message": (
                            f"credential {row.id} ({auth.get('secret_name')}) "
                            f"names {', '.join(blocked)} in its allowed_hosts, which this "
                            f"environment's {kind} networking does not allow; its secret is "
                            "never sent there"
                        ),
                        "credential_id": row.id,
                        "vault_id": str(row.body.get("vault_id")),
                    }
                )
        return errors


def _injection(cred: ResolvedSecret, placeholder: str) -> Injection:
    net = cred.auth.get("networking") or {}
    where = cred.auth.get("injection_location") or {"header": True, "body": False}
    hosts = tuple(net.get("allowed_hosts") or ()) if net.get("type") == "limited" else None
    return Injection(
        placeholder=placeholder,
        secret=Hidden(cred.secrets["secret_value"].reveal().encode()),
        hosts=hosts,
        header=bool(where.get("header")),
        body=bool(where.get("body")),
    )


def blocked_hosts(credential_net: dict[str, Any], environment_net: dict[str, Any]) -> list[str]:
    """The credential's `allowed_hosts` entries no request allowed by the environment's
    networking can reach (an `unrestricted` credential names none)."""
    if credential_net.get("type") != "limited":
        return []
    hosts = [str(h).lower() for h in credential_net.get("allowed_hosts") or ()]
    kind = environment_net.get("type", "unrestricted")
    if kind == "unrestricted":
        return []
    if kind == "none":
        return hosts
    rules = [str(r).lower().rstrip(".") for r in environment_net.get("allowed_hosts") or ()]
    return [h for h in hosts if not any(_overlap(h, r) for r in rules)]


def _overlap(credential_host: str, rule: str) -> bool:
    """Whether some host matches both a credential entry and an environment rule (`*.s`
    means subdomains of s, on both sides)."""
    if not credential_host.startswith("*."):
        return _matches(rule, credential_host)
    if not rule.startswith("*."):
        return _matches(credential_host, rule)
    a, b = credential_host[2:], rule[2:]
    return a == b or a.endswith("." + b) or b.endswith("." + a)


def _matches(rule: str, host: str) -> bool:
    if rule.startswith("*."):
        return host.endswith(rule[1:]) and len(host) > len(rule) - 1
    return rule == host
