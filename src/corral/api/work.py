"""`/v1/environments/{id}/work/*`, and what worker credentials may reach (`WorkerAuth`)."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from corral.api.http import json_route, query_int, read_json
from corral.errors import ApiError, BadRequest, Forbidden, Unauthorized
from corral.service.work import (
    EnvironmentPrincipal,
    Principal,
    SessionPrincipal,
    WorkService,
)
from corral.store.base import Store

_WORK = re.compile(
    r"^/v1/environments/(?P<env>[^/]+)/work(?:/(?P<item>[^/]+)(?:/(?P<op>[^/]+))?)?$"
)
_SESSION = re.compile(r"^/v1/sessions/(?P<sid>[^/]+)(?P<rest>/events(?:/stream)?)?/?$")
_SKILL = re.compile(r"^/v1/skills/[^/]+(?:/versions/[^/]+(?:/content)?)?$")
_MEMORY = re.compile(r"^/v1/memory_stores(?:/(?P<store>[^/]+).*)?$")
_LEASE_OPS = frozenset({"heartbeat", "stop"})


def routes(service: WorkService) -> list[Route]:
    """The work-queue routes."""
    base = "/v1/environments/{environment_id}/work"

    async def poll(request: Request) -> Any:
        return await service.poll(
            request.path_params["environment_id"],
            block_ms=query_int(request, "block_ms"),
            reclaim_older_than_ms=query_int(request, "reclaim_older_than_ms"),
            worker_id=request.headers.get("anthropic-worker-id"),
        )

    async def ack(request: Request) -> Any:
        return await service.ack(request.path_params["environment_id"], request.path_params["id"])

    async def heartbeat(request: Request) -> Any:
        expected = request.query_params.get("expected_last_heartbeat")
        return await service.heartbeat(
            request.path_params["environment_id"],
            request.path_params["id"],
            expected=expected,
            ttl=query_int(request, "desired_ttl_seconds"),
        )

    async def stop(request: Request) -> Any:
        body = await read_json(request)
        if not isinstance(body, dict) or set(body) - {"force"}:
            raise BadRequest("body: only `force` may be given")
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise BadRequest("force: must be a boolean")
        return await service.stop(
            request.path_params["environment_id"], request.path_params["id"], force=force
        )

    async def stats(request: Request) -> Any:
        return await service.stats(request.path_params["environment_id"])

    async def list_work(request: Request) -> Any:
        return await service.list(
            request.path_params["environment_id"],
            limit=query_int(request, "limit"),
            page=request.query_params.get("page") or None,
        )

    async def retrieve(request: Request) -> Any:
        return await service.retrieve(
            request.path_params["environment_id"], request.path_params["id"]
        )

    async def update(request: Request) -> Any:
        body = await read_json(request)
        metadata = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(body, dict) or set(body) - {"metadata"} or not isinstance(metadata, dict):
            raise BadRequest("metadata: required, an object of strings (null deletes a key)")
        for key, value in metadata.items():
            if value is not None and not isinstance(value, str):
                raise BadRequest(f"metadata.{key}: must be a string or null")
        return await service.update(
            request.path_params["environment_id"], request.path_params["id"], metadata
        )

    item = base + "/{id}"
    return [
        Route(base + "/poll", json_route(poll), methods=["GET"]),
        Route(base + "/stats", json_route(stats), methods=["GET"]),
        Route(base, json_route(list_work), methods=["GET"]),
        Route(item + "/ack", json_route(ack), methods=["POST"]),
        Route(item + "/heartbeat", json_route(heartbeat), methods=["POST"]),
        Route(item + "/stop", json_route(stop), methods=["POST"]),
        Route(item, json_route(retrieve), methods=["GET"]),
        Route(item, json_route(update), methods=["POST"]),
    ]


class WorkerAuth:
    """Decides what a request bearing a worker credential (not an API key) may do."""

    def __init__(self, service: WorkService, store: Store) -> None:
        self.service = service
        self.store = store

    async def refusal(self, method: str, path: str, token: str | None) -> ApiError | None:
        """None when `token` is a worker credential allowed to make this request."""
        principal = await self.service.authenticate(token) if token else None
        if principal is None:
            return Unauthorized("invalid or missing API key")
        if isinstance(principal, SessionPrincipal) and not principal.live:
            # A worker back after its lease expired (e.g. it was paused) learns it from its
            # heartbeat's 412; every other call of a stopped item's token is refused.
            work = _WORK.match(path)
            if (
                method == "POST"
                and work is not None
                and work["env"] == principal.environment_id
                and work["item"] == principal.work_id
                and work["op"] == "heartbeat"
            ):
                return None
            return Unauthorized(
                f"the sessions token of work {principal.work_id} expired: the item stopped"
            )
        if await self._allows(principal, method, path):
            return None
        if _MEMORY.match(path) and isinstance(principal, EnvironmentPrincipal):
            return Forbidden("memory stores do not accept environment keys; use a sessions token")
        return Forbidden(f"this credential may not {method} {path}")

    async def _allows(self, who: Principal, method: str, path: str) -> bool:
        work = _WORK.match(path)
        if work is not None:
            return _work_allowed(who, method, work)
        session = _SESSION.match(path)
        if session is not None:
            writes = method == "POST" and session["rest"] == "/events"
            if method != "GET" and not writes:
                return False
            return await self._session_allowed(who, session["sid"])
        if _SKILL.match(path):
            return method == "GET"
        memory = _MEMORY.match(path)
        if memory is not None and isinstance(who, SessionPrincipal):
            return await self._memory_allowed(who, memory["store"])
        return False

    async def _session_allowed(self, who: Principal, session_id: str) -> bool:
        if isinstance(who, SessionPrincipal):
            return session_id == who.session_id
        row = await self.store.get_session(session_id)
        return row is not None and row.environment_id == who.environment_id

    async def _memory_allowed(self, who: SessionPrincipal, store_id: str | None) -> bool:
        """Only the memory stores attached to the token's session."""
        if store_id is None:
            return False
        row = await self.store.get_session(who.session_id)
        resources = row.body.get("resources", []) if row is not None else []
        return any(
            r.get("type") == "memory_store" and r.get("memory_store_id") == store_id
            for r in resources
        )


def _work_allowed(who: Principal, method: str, match: re.Match[str]) -> bool:
    if match["env"] != who.environment_id:
        return False
    item, op = match["item"], match["op"]
    if isinstance(who, SessionPrincipal):
        return method == "POST" and item == who.work_id and op in _LEASE_OPS
    if item is None or item in ("poll", "stats"):
        return method == "GET" and op is None
    return method == "POST" and op in _LEASE_OPS | {"ack"}
