"""Routes for vaults and their credentials (`client.beta.vaults`, `vaults.credentials`)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from corral.api.http import json_route, parse_body
from corral.api.resources import list_page
from corral.runtime import Runtime
from corral.wire.vaults import CredentialCreate, CredentialUpdate, VaultCreate, VaultUpdate

_VAULT = "/v1/vaults/{vault_id}"
_CREDENTIAL = _VAULT + "/credentials/{credential_id}"


def routes(runtime: Runtime) -> list[Route]:
    """Vault and credential endpoints."""
    vaults = runtime.vaults

    async def create_vault(request: Request) -> Any:
        return await vaults.create(await parse_body(request, VaultCreate))

    async def list_vaults(request: Request) -> Any:
        return await vaults.list(list_page(request, default=20, maximum=100))

    async def get_vault(request: Request) -> Any:
        return await vaults.get(request.path_params["vault_id"])

    async def update_vault(request: Request) -> Any:
        body = await parse_body(request, VaultUpdate)
        return await vaults.update(request.path_params["vault_id"], body)

    async def archive_vault(request: Request) -> Any:
        return await vaults.archive(request.path_params["vault_id"])

    async def delete_vault(request: Request) -> Any:
        return await vaults.delete(request.path_params["vault_id"])

    async def create_credential(request: Request) -> Any:
        body = await parse_body(request, CredentialCreate)
        return await vaults.create_credential(request.path_params["vault_id"], body)

    async def list_credentials(request: Request) -> Any:
        page = list_page(request, default=20, maximum=100)
        return await vaults.list_credentials(request.path_params["vault_id"], page)

    async def get_credential(request: Request) -> Any:
        return await vaults.get_credential(*_ids(request))

    async def update_credential(request: Request) -> Any:
        body = await parse_body(request, CredentialUpdate)
        return await vaults.update_credential(*_ids(request), body)

    async def archive_credential(request: Request) -> Any:
        return await vaults.archive_credential(*_ids(request))

    async def delete_credential(request: Request) -> Any:
        return await vaults.delete_credential(*_ids(request))

    async def validate_credential(request: Request) -> Any:
        return await vaults.validate_credential(*_ids(request))

    return [
        Route("/v1/vaults", json_route(create_vault), methods=["POST"]),
        Route("/v1/vaults", json_route(list_vaults), methods=["GET"]),
        Route(_VAULT, json_route(get_vault), methods=["GET"]),
        Route(_VAULT, json_route(update_vault), methods=["POST"]),
        Route(_VAULT, json_route(delete_vault), methods=["DELETE"]),
        Route(_VAULT + "/archive", json_route(archive_vault), methods=["POST"]),
        Route(_VAULT + "/credentials", json_route(create_credential), methods=["POST"]),
        Route(_VAULT + "/credentials", json_route(list_credentials), methods=["GET"]),
        Route(_CREDENTIAL, json_route(get_credential), methods=["GET"]),
        Route(_CREDENTIAL, json_route(update_credential), methods=["POST"]),
        Route(_CREDENTIAL, json_route(delete_credential), methods=["DELETE"]),
        Route(_CREDENTIAL + "/archive", json_route(archive_credential), methods=["POST"]),
        Route(
            _CREDENTIAL + "/mcp_oauth_validate", json_route(validate_credential), methods=["POST"]
        ),
    ]


def _ids(request: Request) -> tuple[str, str]:
    return request.path_params["vault_id"], request.path_params["credential_id"]
