"""Request parsing and error rendering shared by every route module."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from corral.errors import ApiError, BadRequest, NotFound, PayloadTooLarge, StoreUnavailable
from corral.ids import new_id

M = TypeVar("M", bound=BaseModel)
MAX_JSON_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 64
# Discriminator values pydantic puts in error locations; the client never wrote them as keys.
_UNION_TAGS = frozenset(
    {
        "agent",
        "agent_with_overrides",
        "custom",
        "mcp_toolset",
        "agent_toolset_20260401",
        "file",
        "github_repository",
        "memory_store",
        "cloud",
        "self_hosted",
        "unrestricted",
        "limited",
        "always_allow",
        "always_ask",
        "auto",
        "text",
        "image",
        "document",
        "redacted",
        "search_result",
        "base64",
        "url",
        "str",
        "mcp_oauth",
        "static_bearer",
        "environment_variable",
        "none",
        "client_secret_basic",
        "client_secret_post",
    }
)


def error_response(exc: ApiError) -> JSONResponse:
    """The wire error envelope with a request id."""
    request_id = new_id("req")
    headers = {"request-id": request_id}
    if exc.should_retry is not None:
        headers["x-should-retry"] = "true" if exc.should_retry else "false"
    return JSONResponse(exc.body(request_id), status_code=exc.status, headers=headers)


def for_request(exc: ApiError, method: str) -> ApiError:
    """A read cannot have applied anything: a store timeout during one is a plain,
    retryable 503 even when the store could not tell a read from a commit."""
    if isinstance(exc, StoreUnavailable) and exc.outcome_unknown and method in ("GET", "HEAD"):
        return StoreUnavailable("the database did not answer in time; retry the request")
    return exc


async def read_json(request: Request) -> Any:
    """The body as JSON, within size, depth and value limits every store can hold."""
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_JSON_BYTES:
            raise PayloadTooLarge(f"request body exceeds {MAX_JSON_BYTES} bytes")
    if not raw.strip():
        return {}
    try:
        data = json.loads(bytes(raw), parse_constant=_reject_constant)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise BadRequest(f"request body is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise BadRequest(f"request body nests deeper than {MAX_DEPTH} levels") from exc
    check_json_values(data)
    return data


async def parse_body(request: Request, model: type[M]) -> M:
    """Validate a JSON object body; errors name the offending field."""
    data = await read_json(request)
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(describe_validation(exc)) from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def check_json_values(value: Any, path: str = "body", depth: int = 0) -> None:
    """Refuse what would parse here but not round-trip: deep nesting, lone surrogates,
    integers beyond 64 bits."""
    if depth > MAX_DEPTH:
        raise BadRequest(f"{path}: nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _check_text(value, path)
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise BadRequest(f"{path}: integer out of range")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_values(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, path)
            check_json_values(item, f"{path}.{key}" if path != "body" else key, depth + 1)


def _check_text(text: str, path: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(f"{path}: contains an unpaired surrogate (invalid Unicode)") from exc
    if "\x00" in text:  # PostgreSQL text cannot hold NUL; refuse it on every backend alike
        raise BadRequest(f"{path}: contains a NUL character")


def describe_validation(exc: ValidationError) -> str:
    """`field.path: message` for the first few problems, in the request's own terms."""
    parts = []
    for error in exc.errors(include_url=False)[:5]:
        parts.append(f"{_wire_path(error['loc'])}: {error['msg']}")
    return "; ".join(parts)


def _wire_path(loc: tuple[Any, ...]) -> str:
    """`events[0].content` from pydantic's location, minus its internal union/validator tags."""
    out = ""
    for index, part in enumerate(loc):
        text = str(part)
        is_tag = text in _UNION_TAGS and 0 < index < len(loc) - 1
        if isinstance(part, int):
            out += f"[{part}]"
        elif not (is_tag or any(c in text for c in ".[-")):
            out += f".{text}" if out else text
    return out or "body"


def _check_params(request: Request) -> None:
    """No stored id or filter can contain NUL or invalid Unicode: refuse such parameters."""
    for name, value in request.path_params.items():
        if "\x00" in str(value):
            raise NotFound(f"{name}: no object has an id containing a NUL character")
    for name, value in request.query_params.multi_items():
        _check_text(value, name)


def query_list(request: Request, name: str) -> list[str]:
    """Accept both `name[]=a&name[]=b` and repeated `name=a`."""
    return request.query_params.getlist(f"{name}[]") + request.query_params.getlist(name)


def query_int(request: Request, name: str) -> int | None:
    """An integer query parameter, or BadRequest."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if not (value.isascii() and value.lstrip("-").isdigit()) or len(value) > 12:
        raise BadRequest(f"{name}: must be an integer of at most 12 digits")
    return int(value)


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
            _check_params(request)
            result = await handler(request)
        except ApiError as exc:
            return error_response(for_request(exc, request.method))
        except ClientDisconnect:
            return Response(status_code=499)  # the client left mid-body: nothing was applied
        if isinstance(result, Response):
            return result
        return JSONResponse(result)

    endpoint.__name__ = handler.__name__
    return endpoint
