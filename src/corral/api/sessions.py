"""Routes for sessions and their events (send, list, SSE stream)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from corral.api.http import json_route, parse_body, query_int, query_list, query_order
from corral.api.resources import list_page
from corral.errors import BadRequest
from corral.runtime import Runtime
from corral.store.base import SessionFilter
from corral.wire.events import SendEvents
from corral.wire.sessions import FileResource, ResourceUpdate, SessionCreate, SessionUpdate

_STATUSES = frozenset({"rescheduling", "running", "idle", "terminated"})


def routes(runtime: Runtime) -> list[Route]:
    """Session endpoints."""
    sessions, events = runtime.sessions, runtime.events

    async def create(request: Request) -> Any:
        return await sessions.create(await parse_body(request, SessionCreate))

    async def retrieve(request: Request) -> Any:
        found = await sessions.get(request.path_params["session_id"])
        if runtime.threads is not None:  # a multi-agent session's usage sums its threads'
            found = await runtime.threads.session_usage(found)
        return found

    async def update(request: Request) -> Any:
        return await sessions.update(
            request.path_params["session_id"], await parse_body(request, SessionUpdate)
        )

    # Archive, delete and resource changes only change rows: the process holding the
    # session's sandbox (maybe another one) follows them (`SandboxPool.tick`).
    async def archive(request: Request) -> Any:
        return await sessions.archive(request.path_params["session_id"])

    async def delete(request: Request) -> Any:
        return await sessions.delete(request.path_params["session_id"])

    async def list_sessions(request: Request) -> Any:
        statuses = query_list(request, "statuses")
        for status in statuses:
            if status not in _STATUSES:
                raise BadRequest(f"statuses: unknown status {status!r}")
        agent_version = query_int(request, "agent_version")
        agent_id = request.query_params.get("agent_id")
        if agent_version is not None and not agent_id:
            raise BadRequest("agent_version: only allowed together with agent_id")
        page = list_page(request, default=20, maximum=1000, order=query_order(request, "desc"))
        where = SessionFilter(
            agent_id=agent_id,
            agent_version=agent_version,
            statuses=statuses,
            memory_store_id=request.query_params.get("memory_store_id") or None,
        )
        return await sessions.list(page, where)

    async def send(request: Request) -> Any:
        return await events.send(
            request.path_params["session_id"], await parse_body(request, SendEvents)
        )

    async def list_events(request: Request) -> Any:
        created = {
            f"created_{op}": request.query_params.get(f"created_at[{op}]")
            for op in ("gt", "gte", "lt", "lte")
        }
        return await events.list(
            request.path_params["session_id"],
            limit=query_int(request, "limit"),
            page=request.query_params.get("page") or None,
            order=query_order(request, "asc"),
            types=query_list(request, "types"),
            created=created,
        )

    async def add_resource(request: Request) -> Any:
        session_id = request.path_params["session_id"]
        body = await parse_body(request, FileResource)
        return await sessions.add_resource(session_id, body)

    async def list_resources(request: Request) -> Any:
        row = await sessions.row(request.path_params["session_id"])
        limit = query_int(request, "limit")
        if limit is not None and not 1 <= limit <= 1000:
            raise BadRequest("limit: must be between 1 and 1000")
        data = row.body["resources"][: limit or None]
        return {"data": data, "next_page": None}

    async def get_resource(request: Request) -> Any:
        return await sessions.resource(
            request.path_params["session_id"], request.path_params["resource_id"]
        )

    async def update_resource(request: Request) -> Any:
        session_id = request.path_params["session_id"]
        resource_id = request.path_params["resource_id"]
        await sessions.resource(session_id, resource_id)  # 404 before the body is judged
        body = await parse_body(request, ResourceUpdate)
        return await sessions.update_resource(session_id, resource_id, body.authorization_token)

    async def delete_resource(request: Request) -> Any:
        return await sessions.delete_resource(
            request.path_params["session_id"], request.path_params["resource_id"]
        )

    resource = "/v1/sessions/{session_id}/resources/{resource_id}"
    return [
        Route("/v1/sessions/{session_id}/resources", json_route(add_resource), methods=["POST"]),
        Route("/v1/sessions/{session_id}/resources", json_route(list_resources), methods=["GET"]),
        Route(resource, json_route(get_resource), methods=["GET"]),
        Route(resource, json_route(update_resource), methods=["POST"]),
        Route(resource, json_route(delete_resource), methods=["DELETE"]),
        Route("/v1/sessions", json_route(create), methods=["POST"]),
        Route("/v1/sessions", json_route(list_sessions), methods=["GET"]),
        Route("/v1/sessions/{session_id}", json_route(retrieve), methods=["GET"]),
        Route("/v1/sessions/{session_id}", json_route(update), methods=["POST"]),
        Route("/v1/sessions/{session_id}", json_route(delete), methods=["DELETE"]),
        Route("/v1/sessions/{session_id}/archive", json_route(archive), methods=["POST"]),
        Route("/v1/sessions/{session_id}/events", json_route(send), methods=["POST"]),
        Route("/v1/sessions/{session_id}/events", json_route(list_events), methods=["GET"]),
    ]
