"""Environments: where a session's hands run (`cloud` = this server's sandboxes)."""

from __future__ import annotations

from typing import Any

from corral.errors import BadRequest, NotFound
from corral.ids import new_id, now_rfc3339
from corral.service.common import apply_metadata_patch, page_envelope
from corral.store.base import Page, Resource, Store
from corral.wire.environments import (
    CloudConfig,
    EnvironmentCreate,
    EnvironmentUpdate,
    Limited,
    Packages,
    SelfHostedConfig,
)

_PACKAGE_KINDS = ("apt", "cargo", "gem", "go", "npm", "pip")
_UNSUPPORTED_KINDS = ("apt", "cargo", "gem", "go")
"""Package managers the local sandbox backend cannot install for (see `hands.layers`)."""


def resolve_config(
    config: CloudConfig | SelfHostedConfig | None, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The response form of an environment config (all fields concrete)."""
    if isinstance(config, SelfHostedConfig):
        return {"type": "self_hosted"}
    previous = previous or {}
    sent = config.model_fields_set if config is not None else set()
    networking = previous.get("networking", {"type": "unrestricted"})
    if config is not None and "networking" in sent:
        networking = _networking(config.networking)
    packages = previous.get("packages") or _packages(None)
    if config is not None and "packages" in sent:
        packages = _packages(config.packages)
        _check_managers(packages)
    wants_packages = any(packages[k] for k in _PACKAGE_KINDS)
    if (
        networking["type"] == "limited"
        and wants_packages
        and not networking["allow_package_managers"]
    ):
        raise BadRequest(
            "config.networking.allow_package_managers: must be true when packages are given"
        )
    return {"type": "cloud", "networking": networking, "packages": packages}


def _check_managers(packages: dict[str, Any]) -> None:
    """Only pip and npm can be installed into a local sandbox's package layer."""
    for kind in _UNSUPPORTED_KINDS:
        if packages[kind]:
            raise BadRequest(
                f"config.packages.{kind}: {kind} packages are not supported by the local "
                "sandbox backend; use pip or npm"
            )


def _networking(value: Any) -> dict[str, Any]:
    if isinstance(value, Limited):
        return {
            "type": "limited",
            "allowed_hosts": list(value.allowed_hosts or []),
            "allow_mcp_servers": bool(value.allow_mcp_servers),
            "allow_package_managers": bool(value.allow_package_managers),
        }
    return {"type": "unrestricted"}


def _packages(value: Packages | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "packages"}
    for kind in _PACKAGE_KINDS:
        out[kind] = list(getattr(value, kind) or []) if value is not None else []
    return out


class EnvironmentService:
    """CRUD for environments."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def create(self, req: EnvironmentCreate) -> dict[str, Any]:
        """A new environment (cloud with unrestricted networking by default)."""
        now = now_rfc3339()
        body: dict[str, Any] = {
            "id": new_id("env"),
            "type": "environment",
            "name": req.name,
            "description": req.description,
            "metadata": dict(req.metadata or {}),
            "config": resolve_config(req.config),
            "scope": req.scope or "organization",
            "created_at": now,
            "updated_at": now,
            "archived_at": None,
        }
        await self.store.insert_resource(
            Resource(kind="environment", id=body["id"], body=body, created_at=now)
        )
        return body

    async def get(self, environment_id: str) -> dict[str, Any]:
        """The environment."""
        return (await self._row(environment_id)).body

    async def update(self, environment_id: str, req: EnvironmentUpdate) -> dict[str, Any]:
        """Apply sent fields; changing `config.type` is refused."""
        row = await self._row(environment_id)
        body = dict(row.body)
        sent = req.model_fields_set
        if "name" in sent:
            if req.name is None:
                raise BadRequest("name: cannot be cleared")
            body["name"] = req.name
        if "description" in sent:
            body["description"] = req.description
        if "scope" in sent:
            body["scope"] = req.scope
        if "metadata" in sent:
            body["metadata"] = apply_metadata_patch(body["metadata"], req.metadata)
        if "config" in sent and req.config is not None:
            if req.config.type != body["config"]["type"]:
                raise BadRequest(
                    "config.type: cannot change an environment's config type",
                    error_code="invalid_config_type_change",
                )
            body["config"] = resolve_config(req.config, body["config"])
        body["updated_at"] = now_rfc3339()
        await self._save(row, body)
        return body

    async def archive(self, environment_id: str) -> dict[str, Any]:
        """No new sessions may use it."""
        row = await self._row(environment_id)
        body = dict(row.body)
        if body.get("archived_at") is None:
            body["archived_at"] = body["updated_at"] = now_rfc3339()
            await self._save(row, body)
        return body

    async def delete(self, environment_id: str) -> dict[str, Any]:
        """Remove it."""
        if not await self.store.delete_resource("environment", environment_id):
            raise NotFound(
                f"environment {environment_id} not found", error_code="environment_not_found"
            )
        return {"id": environment_id, "type": "environment_deleted"}

    async def list(self, page: Page) -> dict[str, Any]:
        """A page of environments."""
        rows = await self.store.list_resources("environment", page)
        return page_envelope(rows, page.limit, lambda r: r.body, lambda r: r.id)

    async def _row(self, environment_id: str) -> Resource:
        row = await self.store.get_resource("environment", environment_id)
        if row is None:
            raise NotFound(
                f"environment {environment_id} not found", error_code="environment_not_found"
            )
        return row

    async def _save(self, row: Resource, body: dict[str, Any]) -> None:
        await self.store.replace_resource(
            Resource(
                kind="environment",
                id=row.id,
                body=body,
                created_at=row.created_at,
                archived_at=body.get("archived_at"),
            )
        )
