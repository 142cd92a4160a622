"""Routes for files (multipart upload, binary download) and skills.

Multipart bodies are streamed through a byte cap into spooled temp files (never read whole
into memory); every download is an attachment with `nosniff`, whatever its media type.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData, UploadFile
from starlette.formparsers import MultiPartParser
from starlette.requests import ClientDisconnect, Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from corral.api.http import json_route, query_int, query_list
from corral.errors import ApiError, BadRequest, PayloadTooLarge
from corral.files.service import served_media_type
from corral.runtime import Runtime
from corral.service.skills import MAX_SKILL_BYTES, UploadedFile

# Room for part headers and small fields around the file bytes a cap is about.
_MULTIPART_SLACK = 2 * 1024 * 1024
_MAX_FIELD_BYTES = 64 * 1024


def download_headers(filename: str, size: int | None = None) -> dict[str, str]:
    """An attachment (never rendered inline by a browser) with its name in RFC 5987 form."""
    headers = {
        "content-disposition": "attachment; filename*=UTF-8''" + quote(filename, safe=""),
        "x-content-type-options": "nosniff",
    }
    if size is not None:
        headers["content-length"] = str(size)
    return headers


async def _capped(
    request: Request, limit: int, too_large: Callable[[], ApiError]
) -> AsyncGenerator[bytes, None]:
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > limit:
            raise too_large()
        yield chunk


@asynccontextmanager
async def _form(
    request: Request, limit: int, too_large: Callable[[], ApiError]
) -> AsyncIterator[FormData]:
    """The multipart form, file parts spooled to disk past 1 MiB, at most `limit` bytes in all;
    its temp files are closed on exit."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise BadRequest("request body must be multipart/form-data")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large()
    parser = MultiPartParser(
        request.headers,
        _capped(request, limit, too_large),
        max_files=1000,
        max_fields=20,
        max_part_size=_MAX_FIELD_BYTES,
    )
    try:
        form = await parser.parse()
    except (ApiError, ClientDisconnect):
        raise
    except Exception as exc:  # malformed multipart of any kind is the client's error
        raise BadRequest(f"invalid multipart body: {exc}") from exc
    try:
        yield form
    finally:
        await form.close()


def _skill_too_large() -> ApiError:
    return BadRequest(f"files: a skill may be at most {MAX_SKILL_BYTES} bytes (uncompressed)")


def routes(runtime: Runtime) -> list[Route]:
    """File and skill endpoints."""
    files, skills = runtime.files, runtime.skills

    def file_too_large() -> ApiError:
        return PayloadTooLarge(f"file exceeds the {files.max_bytes}-byte limit")

    async def upload(request: Request) -> Any:
        async with _form(request, files.max_bytes + _MULTIPART_SLACK, file_too_large) as form:
            part = form.get("file")
            if not isinstance(part, UploadFile):
                raise BadRequest("file: a multipart part named 'file' is required")
            expires = form.get("expires_in_seconds")
            try:
                seconds = int(expires) if isinstance(expires, str) and expires else None
            except ValueError as exc:
                raise BadRequest("expires_in_seconds: must be an integer") from exc
            return await files.upload(
                part.file,
                filename=part.filename,
                mime_type=part.content_type,
                expires_in_seconds=seconds,
            )

    async def list_files(request: Request) -> Any:
        return await files.list_files(
            limit=query_int(request, "limit"),
            page=request.query_params.get("page") or None,
            scope_id=request.query_params.get("scope_id") or None,
            ids=query_list(request, "ids"),
        )

    async def metadata(request: Request) -> Any:
        return await files.metadata(request.path_params["file_id"])

    async def download(request: Request) -> Any:
        meta, chunks = await files.content(request.path_params["file_id"])
        return StreamingResponse(
            chunks,
            media_type=served_media_type(meta),
            headers=download_headers(meta["filename"], meta["size_bytes"]),
        )

    async def delete_file(request: Request) -> Any:
        return await files.delete(request.path_params["file_id"])

    skill_limit = MAX_SKILL_BYTES + _MULTIPART_SLACK

    async def create_skill(request: Request) -> Any:
        async with _form(request, skill_limit, _skill_too_large) as form:
            name = form.get("display_name")
            return await skills.create(
                _skill_files(form), name if isinstance(name, str) and name else None
            )

    async def list_skills(request: Request) -> Any:
        return await skills.list_skills(
            query_int(request, "limit"),
            request.query_params.get("page") or None,
            request.query_params.get("source") or None,
        )

    async def get_skill(request: Request) -> Any:
        return await skills.get(request.path_params["skill_id"])

    async def delete_skill(request: Request) -> Any:
        return await skills.delete(request.path_params["skill_id"])

    async def create_version(request: Request) -> Any:
        async with _form(request, skill_limit, _skill_too_large) as form:
            return await skills.add_version(request.path_params["skill_id"], _skill_files(form))

    async def list_versions(request: Request) -> Any:
        return await skills.versions(
            request.path_params["skill_id"],
            query_int(request, "limit"),
            request.query_params.get("page") or None,
        )

    async def get_version(request: Request) -> Any:
        return await skills.version(request.path_params["skill_id"], request.path_params["version"])

    async def delete_version(request: Request) -> Any:
        return await skills.delete_version(
            request.path_params["skill_id"], request.path_params["version"]
        )

    async def download_version(request: Request) -> Any:
        skill_id, version = request.path_params["skill_id"], request.path_params["version"]
        name = (await skills.version(skill_id, version))["name"]
        chunks = await skills.archive_bytes(skill_id, version)
        return StreamingResponse(
            chunks, media_type="application/zip", headers=download_headers(f"{name}.zip")
        )

    base = "/v1/skills/{skill_id}"
    return [
        Route("/v1/files", json_route(upload), methods=["POST"]),
        Route("/v1/files", json_route(list_files), methods=["GET"]),
        Route("/v1/files/{file_id}", json_route(metadata), methods=["GET"]),
        Route("/v1/files/{file_id}", json_route(delete_file), methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", json_route(download), methods=["GET"]),
        Route("/v1/skills", json_route(create_skill), methods=["POST"]),
        Route("/v1/skills", json_route(list_skills), methods=["GET"]),
        Route(base, json_route(get_skill), methods=["GET"]),
        Route(base, json_route(delete_skill), methods=["DELETE"]),
        Route(base + "/versions", json_route(create_version), methods=["POST"]),
        Route(base + "/versions", json_route(list_versions), methods=["GET"]),
        Route(base + "/versions/{version}", json_route(get_version), methods=["GET"]),
        Route(base + "/versions/{version}", json_route(delete_version), methods=["DELETE"]),
        Route(base + "/versions/{version}/content", json_route(download_version), methods=["GET"]),
    ]


def _skill_files(form: FormData) -> list[UploadedFile]:
    """The `files[]` parts, still in their spooled temp files (the form closes them)."""
    parts = form.getlist("files[]") + form.getlist("files")
    out = []
    for part in parts:
        if not isinstance(part, UploadFile) or not part.filename:
            raise BadRequest("files[]: each part must be a file with a relative path name")
        out.append(UploadedFile(path=part.filename, source=part.file))
    return out
