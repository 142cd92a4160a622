"""Routes for agents and environments."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from corral.api.http import json_route, parse_body, query_bool, query_int
from corral.errors import BadRequest
from corral.runtime import Runtime
from corral.service.common import check_limit, normalize_time
from corral.store.base import Page
from corral.wire.agents import AgentCreate, AgentUpdate
from corral.wire.environments import EnvironmentCreate, EnvironmentUpdate

_CURSOR = re.compile(r"^[a-z]{2,12}_[0-9a-z]{26}$")


def list_page(request: Request, *, default: int, maximum: int, order: str = "asc") -> Page:
    """Common list parameters: limit, page cursor, include_archived, created_at range."""
    cursor = request.query_params.get("page") or None
    if cursor is not None and not _CURSOR.match(cursor):
        raise BadRequest("page: invalid cursor (use the next_page value of a previous page)")
    created = {
        op: normalize_time(request.query_params.get(f"created_at[{op}]"), f"created_at[{op}]")
        for op in ("gt", "gte", "lt", "lte")
    }
    return Page(
        limit=check_limit(query_int(request, "limit"), default=default, maximum=maximum),
        after_id=cursor,
        order=order,  # type: ignore[arg-type]
        include_archived=query_bool(request, "include_archived"),
        created_gt=created["gt"],
        created_gte=created["gte"],
        created_lt=created["lt"],
        created_lte=created["lte"],
    )


def routes(runtime: Runtime) -> list[Route]:
    """Agent and environment endpoints."""
    agents, environments = runtime.agents, runtime.environments

    async def create_agent(request: Request) -> Any:
        return await agents.create(await parse_body(request, AgentCreate))

    async def list_agents(request: Request) -> Any:
        return await agents.list(list_page(request, default=20, maximum=100))

    async def get_agent(request: Request) -> Any:
        version = query_int(request, "version")
        if version is not None and version < 1:
            raise BadRequest("version: must be >= 1")
        return await agents.get(request.path_params["agent_id"], version)

    async def update_agent(request: Request) -> Any:
        return await agents.update(
            request.path_params["agent_id"], await parse_body(request, AgentUpdate)
        )

    async def archive_agent(request: Request) -> Any:
        return await agents.archive(request.path_params["agent_id"])

    async def agent_versions(request: Request) -> Any:
        return await agents.versions(
            request.path_params["agent_id"],
            query_int(request, "limit"),
            request.query_params.get("page") or None,
        )

    async def create_environment(request: Request) -> Any:
        return await environments.create(await parse_body(request, EnvironmentCreate))

    async def list_environments(request: Request) -> Any:
        return await environments.list(list_page(request, default=20, maximum=100))

    async def get_environment(request: Request) -> Any:
        return await environments.get(request.path_params["environment_id"])

    async def update_environment(request: Request) -> Any:
        return await environments.update(
            request.path_params["environment_id"], await parse_body(request, EnvironmentUpdate)
        )

    async def archive_environment(request: Request) -> Any:
        return await environments.archive(request.path_params["environment_id"])

    async def delete_environment(request: Request) -> Any:
        return await environments.delete(request.path_params["environment_id"])

    return [
        Route("/v1/agents", json_route(create_agent), methods=["POST"]),
        Route("/v1/agents", json_route(list_agents), methods=["GET"]),
        Route("/v1/agents/{agent_id}", json_route(get_agent), methods=["GET"]),
        Route("/v1/agents/{agent_id}", json_route(update_agent), methods=["POST"]),
        Route("/v1/agents/{agent_id}/archive", json_route(archive_agent), methods=["POST"]),
        Route("/v1/agents/{agent_id}/versions", json_route(agent_versions), methods=["GET"]),
        Route("/v1/environments", json_route(create_environment), methods=["POST"]),
        Route("/v1/environments", json_route(list_environments), methods=["GET"]),
        Route("/v1/environments/{environment_id}", json_route(get_environment), methods=["GET"]),
        Route(
            "/v1/environments/{environment_id}", json_route(update_environment), methods=["POST"]
        ),
        Route(
            "/v1/environments/{environment_id}", json_route(delete_environment), methods=["DELETE"]
        ),
        Route(
            "/v1/environments/{environment_id}/archive",
            json_route(archive_environment),
            methods=["POST"],
        ),
    ]
