"""Routes of `sessions.threads` (docs/threads.md); the thread SSE tail is in `stream.py`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from corral.api.http import json_route, query_int, query_list
from corral.errors import BadRequest
from corral.service.threads import ThreadService

_STATUSES = frozenset({"rescheduling", "running", "idle", "terminated"})


def routes(threads: ThreadService) -> list[Route]:
    """Thread endpoints."""

    async def list_threads(request: Request) -> Any:
        statuses = query_list(request, "statuses")
        for status in statuses:
            if status not in _STATUSES:
                raise BadRequest(f"statuses: unknown status {status!r}")
        return await threads.list(
            request.path_params["session_id"],
            limit=query_int(request, "limit"),
            page=request.query_params.get("page") or None,
            statuses=statuses,
        )

    async def retrieve(request: Request) -> Any:
        return await threads.get(request.path_params["session_id"], request.path_params["tid"])

    async def archive(request: Request) -> Any:
        return await threads.archive(request.path_params["session_id"], request.path_params["tid"])

    async def list_events(request: Request) -> Any:
        return await threads.list_events(
            request.path_params["session_id"],
            request.path_params["tid"],
            limit=query_int(request, "limit"),
            page=request.query_params.get("page") or None,
        )

    base = "/v1/sessions/{session_id}/threads"
    return [
        Route(base, json_route(list_threads), methods=["GET"]),
        Route(base + "/{tid}", json_route(retrieve), methods=["GET"]),
        Route(base + "/{tid}/archive", json_route(archive), methods=["POST"]),
        Route(base + "/{tid}/events", json_route(list_events), methods=["GET"]),
    ]
