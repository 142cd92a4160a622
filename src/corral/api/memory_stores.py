"""Routes of `client.beta.memory_stores` (stores, `memories`, `memory_versions`).

Clients send the `agent-memory-2026-07-22` (or managed-agents) beta header; like every other
route here, the header is accepted and not required. API writes are attributed to an
`api_actor` whose `api_key_id` is derived from the key (a digest, never the key).
"""

from __future__ import annotations

import hashlib
from typing import Any, cast

from starlette.requests import Request
from starlette.routing import Route

from corral.api.http import json_route, parse_body, query_int
from corral.api.resources import list_page
from corral.errors import BadRequest
from corral.runtime import Runtime
from corral.service.common import check_limit, normalize_time
from corral.service.memory_stores import MemoryListing, VersionListing, View
from corral.store.memory import VersionFilter
from corral.wire.memory_stores import (
    MemoryCreate,
    MemoryStoreCreate,
    MemoryStoreUpdate,
    MemoryUpdate,
    valid_sha256,
)

_STORE = "/v1/memory_stores/{memory_store_id}"
_MEMORIES = _STORE + "/memories"
_VERSIONS = _STORE + "/memory_versions"
_OPERATIONS = ("created", "modified", "deleted")
_ACTOR_FILTERS = {
    "session_id": "session_actor",
    "api_key_id": "api_actor",
    "service_account_id": "service_account_actor",
}


def api_actor(request: Request) -> dict[str, Any]:
    """The `api_actor` for the request's key: `apikey_` + a digest of it."""
    key = request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    if key is None and auth.lower().startswith("bearer "):
        key = auth[7:].strip()
    digest = hashlib.sha256((key or "").encode()).hexdigest()[:24]
    return {"type": "api_actor", "api_key_id": f"apikey_{digest}"}


def _view(request: Request, default: View) -> View:
    value = request.query_params.get("view") or default
    if value not in ("basic", "full"):
        raise BadRequest("view: must be 'basic' or 'full'")
    return cast(View, value)


def _version_filter(request: Request) -> VersionFilter:
    params = request.query_params
    operation = params.get("operation") or None
    if operation is not None and operation not in _OPERATIONS:
        raise BadRequest(f"operation: must be one of {', '.join(_OPERATIONS)}")
    actors = [(name, params[name]) for name in _ACTOR_FILTERS if params.get(name)]
    if len(actors) > 1:
        raise BadRequest("give at most one of session_id, api_key_id, service_account_id")
    actor_type, actor_id = (_ACTOR_FILTERS[actors[0][0]], actors[0][1]) if actors else (None, None)
    return VersionFilter(
        memory_id=params.get("memory_id") or None,
        operation=cast(Any, operation),
        actor_type=actor_type,
        actor_id=actor_id,
        created_gte=normalize_time(params.get("created_at[gte]"), "created_at[gte]"),
        created_lte=normalize_time(params.get("created_at[lte]"), "created_at[lte]"),
    )


def routes(runtime: Runtime) -> list[Route]:
    """Memory store, memory and memory version endpoints."""
    stores = runtime.memory_stores

    def sid(request: Request) -> str:
        return str(request.path_params["memory_store_id"])

    async def create_store(request: Request) -> Any:
        return await stores.create(await parse_body(request, MemoryStoreCreate))

    async def list_stores(request: Request) -> Any:
        return await stores.list(list_page(request, default=20, maximum=100))

    async def get_store(request: Request) -> Any:
        return await stores.get(sid(request))

    async def update_store(request: Request) -> Any:
        return await stores.update(sid(request), await parse_body(request, MemoryStoreUpdate))

    async def archive_store(request: Request) -> Any:
        return await stores.archive(sid(request))

    async def delete_store(request: Request) -> Any:
        return await stores.delete(sid(request))

    async def create_memory(request: Request) -> Any:
        body = await parse_body(request, MemoryCreate)
        return await stores.create_memory(
            sid(request), body, api_actor(request), _view(request, "basic")
        )

    async def list_memories(request: Request) -> Any:
        depth = query_int(request, "depth") or 0
        if depth < 0:
            raise BadRequest("depth: must be 0 or more")
        listing = MemoryListing(
            path_prefix=request.query_params.get("path_prefix") or "/",
            depth=depth,
            limit=check_limit(query_int(request, "limit"), default=20, maximum=100),
            page=request.query_params.get("page") or None,
            view=_view(request, "basic"),
        )
        return await stores.list_memories(sid(request), listing)

    async def get_memory(request: Request) -> Any:
        memory_id = request.path_params["memory_id"]
        return await stores.get_memory(sid(request), memory_id, _view(request, "full"))

    async def update_memory(request: Request) -> Any:
        body = await parse_body(request, MemoryUpdate)
        return await stores.update_memory(
            sid(request),
            request.path_params["memory_id"],
            body,
            api_actor(request),
            _view(request, "basic"),
        )

    async def delete_memory(request: Request) -> Any:
        expected = request.query_params.get("expected_content_sha256") or None
        if expected is not None and not valid_sha256(expected):
            raise BadRequest("expected_content_sha256: must be 64 lowercase hex characters")
        return await stores.delete_memory(
            sid(request), request.path_params["memory_id"], api_actor(request), expected
        )

    async def list_versions(request: Request) -> Any:
        page = request.query_params.get("page") or None
        if page is not None and not page.startswith("memver_"):
            raise BadRequest("page: invalid cursor (use the next_page of a previous page)")
        listing = VersionListing(
            where=_version_filter(request),
            limit=check_limit(query_int(request, "limit"), default=20, maximum=100),
            page=page,
            view=_view(request, "basic"),
        )
        return await stores.list_versions(sid(request), listing)

    async def get_version(request: Request) -> Any:
        version_id = request.path_params["memory_version_id"]
        return await stores.get_version(sid(request), version_id, _view(request, "full"))

    async def redact_version(request: Request) -> Any:
        version_id = request.path_params["memory_version_id"]
        return await stores.redact_version(sid(request), version_id, api_actor(request))

    memory = _MEMORIES + "/{memory_id}"
    version = _VERSIONS + "/{memory_version_id}"
    return [
        Route("/v1/memory_stores", json_route(create_store), methods=["POST"]),
        Route("/v1/memory_stores", json_route(list_stores), methods=["GET"]),
        Route(_STORE, json_route(get_store), methods=["GET"]),
        Route(_STORE, json_route(update_store), methods=["POST"]),
        Route(_STORE, json_route(delete_store), methods=["DELETE"]),
        Route(_STORE + "/archive", json_route(archive_store), methods=["POST"]),
        Route(_MEMORIES, json_route(create_memory), methods=["POST"]),
        Route(_MEMORIES, json_route(list_memories), methods=["GET"]),
        Route(memory, json_route(get_memory), methods=["GET"]),
        Route(memory, json_route(update_memory), methods=["POST"]),
        Route(memory, json_route(delete_memory), methods=["DELETE"]),
        Route(_VERSIONS, json_route(list_versions), methods=["GET"]),
        Route(version, json_route(get_version), methods=["GET"]),
        Route(version + "/redact", json_route(redact_version), methods=["POST"]),
    ]
