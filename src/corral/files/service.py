"""File resources: upload, list (by scope), metadata, download, delete.

Names and media types are untrusted text: they are cleaned or validated here, and downloads
use only a validated media type. This module must not touch sandbox directories.
"""

from __future__ import annotations

import mimetypes
import re
import unicodedata
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, BinaryIO, Literal

from corral.errors import BadRequest, NotFound
from corral.files.blobs import Blob, BlobStore
from corral.ids import new_id, now_rfc3339, parse_rfc3339, rfc3339, utc_now
from corral.service.common import check_limit
from corral.store.base import Page, Resource, Store

_INTERNAL = ("sha256",)
MAX_MEDIA_TYPE = 255
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t\x20\x21\x23-\x5b\x5d-\x7e]|\\[\t\x20-\x7e])*"'  # printable ASCII only
_MEDIA_TYPE = re.compile(
    rf"{_TOKEN}/{_TOKEN}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|{_QUOTED}))*", re.ASCII
)
OCTET_STREAM = "application/octet-stream"


def clean_filename(raw: str | None, mime_type: str | None = None) -> str:
    """A safe display name: last path component, no control characters, bounded length."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(c for c in name if unicodedata.category(c)[0] != "C").strip()
    if name in ("", ".", ".."):
        extension = mimetypes.guess_extension(mime_type or "") or ""
        name = f"unnamed{extension}"
    return name[:255]


def clean_output_path(parts: tuple[str, ...]) -> str:
    """The display name of a file found at `parts` below a session's outputs directory:
    `reports/summary.md`; a top-level file keeps exactly the name `clean_filename` gives."""
    return "/".join(clean_filename(part) for part in parts)


def is_media_type(value: str) -> bool:
    """`type/subtype` with optional `; name=value` parameters (RFC 9110 tokens), no control
    characters, at most 255 characters."""
    return len(value) <= MAX_MEDIA_TYPE and _MEDIA_TYPE.fullmatch(value) is not None


def check_media_type(value: str | None) -> str | None:
    """The media type a client sent with an upload, or BadRequest."""
    if value is None or value == "":
        return None
    if not is_media_type(value):
        raise BadRequest(
            "file: the part's Content-Type must be a media type such as text/plain "
            f"(type/subtype tokens, no control characters, at most {MAX_MEDIA_TYPE} characters)"
        )
    return value


def served_media_type(body: dict[str, Any]) -> str:
    """The Content-Type a download is served with: the stored one only if it is well formed
    (objects stored before validation may hold anything)."""
    stored = body.get("mime_type")
    return stored if isinstance(stored, str) and is_media_type(stored) else OCTET_STREAM


def render_file(body: dict[str, Any]) -> dict[str, Any]:
    """The wire FileMetadata (internal fields removed)."""
    return {k: v for k, v in body.items() if k not in _INTERNAL}


class FileService:
    """Metadata in the store, bytes in the blob store."""

    def __init__(self, store: Store, blobs: BlobStore, *, max_bytes: int) -> None:
        self.store = store
        self.blobs = blobs
        self.max_bytes = max_bytes

    async def upload(
        self,
        source: BinaryIO,
        *,
        filename: str | None,
        mime_type: str | None,
        expires_in_seconds: int | None = None,
        scope_session: str | None = None,
    ) -> dict[str, Any]:
        """Store bytes and create the file object."""
        if expires_in_seconds is not None and not 3600 <= expires_in_seconds <= 7_776_000:
            raise BadRequest("expires_in_seconds: must be between 3600 and 7776000")
        mime_type = check_media_type(mime_type)
        blob = await self.blobs.put(source, max_bytes=self.max_bytes)
        return await self.create(
            blob,
            filename=filename,
            mime_type=mime_type,
            expires_in_seconds=expires_in_seconds,
            scope_session=scope_session,
        )

    async def create(
        self,
        blob: Blob,
        *,
        filename: str | None,
        mime_type: str | None,
        expires_in_seconds: int | None = None,
        scope_session: str | None = None,
        path: bool = False,
    ) -> dict[str, Any]:
        """A file object for an already stored blob; `path` says `filename` is a relative
        path already cleaned by `clean_output_path` (kept whole)."""
        name = filename if path and filename else clean_filename(filename, mime_type)
        kind = mime_type or mimetypes.guess_type(name)[0] or OCTET_STREAM
        now = utc_now()
        expires = (
            rfc3339(now + timedelta(seconds=expires_in_seconds)) if expires_in_seconds else None
        )
        body: dict[str, Any] = {
            "id": new_id("file"),
            "type": "file",
            "filename": name,
            "mime_type": kind,
            "size_bytes": blob.size,
            "created_at": rfc3339(now),
            "downloadable": True,
            "expires_at": expires,
            "scope": {"type": "session", "id": scope_session} if scope_session else None,
            "sha256": blob.sha256,
        }
        await self.store.insert_resource(
            Resource(kind="file", id=body["id"], body=body, created_at=body["created_at"])
        )
        return render_file(body)

    async def get_body(self, file_id: str) -> dict[str, Any]:
        """Stored body (with the blob hash), or NotFound / expired."""
        row = await self.store.get_resource("file", file_id)
        if row is None:
            raise NotFound(f"file {file_id} not found")
        expires = row.body.get("expires_at")
        if expires and parse_rfc3339(expires) <= utc_now():
            raise NotFound(f"file {file_id} has expired", error_code="file_expired")
        return row.body

    async def metadata(self, file_id: str) -> dict[str, Any]:
        """The wire object."""
        return render_file(await self.get_body(file_id))

    async def content(self, file_id: str) -> tuple[dict[str, Any], AsyncIterator[bytes]]:
        """Metadata and a byte stream."""
        body = await self.get_body(file_id)
        if not body.get("downloadable", True):
            raise BadRequest(
                f"file {file_id} is not downloadable", error_code="file_not_downloadable"
            )
        return render_file(body), self.blobs.iter_bytes(body["sha256"])

    async def delete(self, file_id: str) -> dict[str, Any]:
        """Remove the object; the blob goes when nothing else refers to it."""
        body = await self.get_body(file_id)
        await self.store.delete_resource("file", file_id)
        if not any(f.body.get("sha256") == body["sha256"] for f in await self._all()):
            await self.blobs.delete(body["sha256"])
        return {"id": file_id, "type": "file_deleted"}

    async def delete_session_files(self, session_id: str) -> int:
        """Delete every file scoped to a deleted session (its outputs); returns how many."""
        rows = await self._all()
        doomed = [r for r in rows if (r.body.get("scope") or {}).get("id") == session_id]
        for row in doomed:
            await self.store.delete_resource("file", row.id)
        kept = {r.body.get("sha256") for r in rows if r not in doomed}
        for sha in {r.body["sha256"] for r in doomed} - kept:
            await self.blobs.delete(sha)
        return len(doomed)

    async def list_files(
        self, *, limit: int | None, page: str | None, scope_id: str | None, ids: list[str]
    ) -> dict[str, Any]:
        """A page of files, optionally only one session's outputs or the given ids."""
        if ids:
            if len(ids) > 100:
                raise BadRequest("ids: at most 100")
            found = [await self.store.get_resource("file", i) for i in ids]
            return {"data": [render_file(f.body) for f in found if f], "next_page": None}
        size = check_limit(limit, default=20, maximum=1000)
        rows = [r for r in await self._all(order="desc") if _in_scope(r.body, scope_id)]
        if page:
            position = next((i for i, r in enumerate(rows) if r.id == page), None)
            if position is None:
                raise BadRequest("page: invalid cursor")
            rows = rows[position + 1 :]
        shown = rows[:size]
        return {
            "data": [render_file(r.body) for r in shown],
            "next_page": shown[-1].id if len(rows) > size else None,
        }

    async def _all(self, order: Literal["asc", "desc"] = "asc") -> list[Resource]:
        rows: list[Resource] = []
        cursor: str | None = None
        while True:
            batch = await self.store.list_resources(
                "file", Page(limit=1000, after_id=cursor, order=order, include_archived=True)
            )
            rows.extend(batch[:1000])
            if len(batch) <= 1000:
                return rows
            cursor = batch[999].id

    async def session_outputs(self, session_id: str) -> dict[str, dict[str, Any]]:
        """filename -> stored body of a session's output files."""
        return {
            r.body["filename"]: r.body for r in await self._all() if _in_scope(r.body, session_id)
        }

    async def replace_blob(self, body: dict[str, Any], blob: Blob) -> None:
        """Point an output file at new content (the agent rewrote it)."""
        updated = {**body, "sha256": blob.sha256, "size_bytes": blob.size}
        await self.store.replace_resource(
            Resource(kind="file", id=body["id"], body=updated, created_at=body["created_at"])
        )


def _in_scope(body: dict[str, Any], scope_id: str | None) -> bool:
    if scope_id is None:
        return True
    scope = body.get("scope") or {}
    return scope.get("id") == scope_id


def now() -> str:
    """Wire timestamp (re-exported for routes)."""
    return now_rfc3339()
