"""Request parsing and error rendering shared by every route module."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from corral.errors import ApiError, BadRequest
from corral.ids import new_id

M = TypeVar("M", bound=BaseModel)
MAX_JSON_BYTES = 8 * 1024 * 1024


def error_response(exc: ApiError) -> JSONResponse:
    """The wire error envelope with a request id."""
    request_id = new_id("req")
    headers = {"request-id": request_id}
    if exc.should_retry is not None:
        headers["x-should-retry"] = "true" if exc.should_retry else "false"
    return JSONResponse(exc.body(request_id), status_code=exc.status, headers=headers)


async def parse_body(request: Request, model: type[M]) -> M:
    """Validate a JSON body; errors name the offending field."""
    raw = await request.body()
    if len(raw) > MAX_JSON_BYTES:
        raise BadRequest("request body too large")
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(describe_validation(exc)) from exc


def describe_validation(exc: ValidationError) -> str:
    """`field.path: message` for the first few problems."""
    parts = []
    for error in exc.errors()[:5]:
        path = ".".join(str(p) for p in error["loc"]) or "body"
        parts.append(f"{path}: {error['msg']}")
    return "; ".join(parts)


def query_list(request: Request, name: str) -> list[str]:
    """Accept both `name[]=a&name[]=b` and repeated `name=a`."""
    return request.query_params.getlist(f"{name}[]") + request.query_params.getlist(name)


def query_int(request: Request, name: str) -> int | None:
    """An integer query parameter, or BadRequest."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise BadRequest(f"{name}: must be an integer") from exc


def query_bool(request: Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter (`true`/`false`)."""
    value = request.query_params.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1"):
        return True
    if value.lower() in ("false", "0"):
        return False
    raise BadRequest(f"{name}: must be true or false")


def query_order(request: Request, default: str) -> Any:
    """`asc` or `desc`."""
    value = request.query_params.get("order", default)
    if value not in ("asc", "desc"):
        raise BadRequest("order: must be 'asc' or 'desc'")
    return value


Handler = Callable[[Request], Awaitable[Any]]


def json_route(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a handler returning a JSON-able value; ApiErrors become envelopes."""

    async def endpoint(request: Request) -> Response:
        try:
            result = await handler(request)
        except ApiError as exc:
            return error_response(exc)
        if isinstance(result, Response):
            return result
        return JSONResponse(result)

    endpoint.__name__ = handler.__name__
    return endpoint
