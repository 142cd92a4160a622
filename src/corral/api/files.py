"""Routes for files (multipart upload, binary download) and skills."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from corral.api.http import json_route, query_int, query_list
from corral.errors import BadRequest
from corral.runtime import Runtime
from corral.skills.service import UploadedFile


async def _form(request: Request) -> Any:
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise BadRequest("request body must be multipart/form-data")
    try:
        return await request.form(max_files=1000, max_fields=20)
    except Exception as exc:  # malformed multipart of any kind is the client's error
        raise BadRequest(f"invalid multipart body: {exc}") from exc


def routes(runtime: Runtime) -> list[Route]:
    """File and skill endpoints."""
    files, skills = runtime.files, runtime.skills

    async def upload(request: Request) -> Any:
        form = await _form(request)
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
            media_type=meta["mime_type"],
            headers={"content-length": str(meta["size_bytes"])},
        )

    async def delete_file(request: Request) -> Any:
        return await files.delete(request.path_params["file_id"])

    async def create_skill(request: Request) -> Any:
        form = await _form(request)
        name = form.get("display_name")
        return await skills.create(
            await _skill_files(form), name if isinstance(name, str) and name else None
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
        form = await _form(request)
        return await skills.add_version(request.path_params["skill_id"], await _skill_files(form))

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
        chunks = await skills.archive_bytes(
            request.path_params["skill_id"], request.path_params["version"]
        )
        return StreamingResponse(chunks, media_type="application/zip")

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


async def _skill_files(form: Any) -> list[UploadedFile]:
    parts = form.getlist("files[]") + form.getlist("files")
    out = []
    for part in parts:
        if not isinstance(part, UploadFile) or not part.filename:
            raise BadRequest("files[]: each part must be a file with a relative path name")
        out.append(UploadedFile(path=part.filename, data=await part.read()))
    return out
