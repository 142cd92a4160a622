"""Session resources: files mounted read-only into the session's sandbox, and git
repositories cloned into its workspace (`service.repositories`)."""

from __future__ import annotations

import posixpath
from typing import Any

from corral.errors import BadRequest, NotFound
from corral.files.service import FileService
from corral.ids import new_id, now_rfc3339
from corral.service.memory_resources import MemoryResources
from corral.service.repositories import RepositoryResources, check_token
from corral.wire.sessions import FileResource, GithubRepository

UPLOADS = "/mnt/session/uploads"
_MOUNT_ROOTS = ("/mnt/session/uploads/", "/mnt/data/")
"""Never under /workspace: a mount point there could be swapped for a symlink by the sandbox."""


_SERVER_SIDE_ONLY = frozenset({"file", "github_repository"})
"""Resource kinds that self-hosted hands cannot have: the server keeps their content."""


def mount_path(requested: str | None, file_id: str, where: str) -> str:
    """Where a file appears in the sandbox; relative paths are under the uploads folder."""
    raw = requested or file_id
    if "\x00" in raw or any(ord(c) < 32 for c in raw):
        raise BadRequest(f"{where}.mount_path: control characters are not allowed")
    path = posixpath.normpath(raw if raw.startswith("/") else f"{UPLOADS}/{raw}")
    if not path.startswith(_MOUNT_ROOTS) or ".." in path.split("/"):
        raise BadRequest(
            f"{where}.mount_path: must be under {', '.join(_MOUNT_ROOTS)} (got {raw!r})"
        )
    return path


class SessionResources:
    """Validate and build `file` and (with `repositories`) `github_repository` resources;
    other kinds are refused with a clear 400."""

    def __init__(self, files: FileService, repositories: RepositoryResources | None = None) -> None:
        self.files = files
        self.memory: MemoryResources | None = None
        """Builds `memory_store` entries; set by the runtime, which serves memory stores."""
        self.repositories = repositories

    async def build(
        self,
        item: Any,
        where: str,
        taken: set[str],
        tokens: dict[str, str] | None = None,
        *,
        remote: bool = False,
    ) -> dict[str, Any]:
        """A stored resource entry for a create/add request item; a repository's token is
        put in `tokens` (resource id -> token) for `save_tokens` once the session exists.
        `remote`: the session's hands are self-hosted, which get no files or repositories."""
        kind = getattr(item, "type", None)
        if remote and kind in _SERVER_SIDE_ONLY:
            raise BadRequest(
                f"{where}: '{kind}' resources are not available on self_hosted environments "
                "(their blobs and tokens stay on the server; see docs/self_hosted.md)",
                error_code="unsupported_resource",
            )
        if isinstance(item, GithubRepository) and self.repositories is not None:
            entry = self.repositories.build(item, where, taken)
            if item.authorization_token is not None and tokens is not None:
                tokens[entry["id"]] = item.authorization_token
            return entry
        if getattr(item, "type", None) == "memory_store" and self.memory is not None:
            return await self.memory.build(item, where, taken)
        if not isinstance(item, FileResource):
            raise BadRequest(
                f"{where}: '{item.type}' resources are not supported by this server yet",
                error_code="unsupported_resource",
            )
        try:
            await self.files.get_body(item.file_id)
        except NotFound as exc:
            raise BadRequest(f"{where}.file_id: {exc.message}") from exc
        path = mount_path(item.mount_path, item.file_id, where)
        if path in taken:
            raise BadRequest(f"{where}.mount_path: {path} is used twice")
        taken.add(path)
        now = now_rfc3339()
        return {
            "id": new_id("sesrsc"),
            "type": "file",
            "file_id": item.file_id,
            "mount_path": path,
            "created_at": now,
            "updated_at": now,
        }

    async def build_all(
        self, items: list[Any], tokens: dict[str, str] | None = None, *, remote: bool = False
    ) -> list[dict[str, Any]]:
        """Entries for `sessions.create(resources=...)`; repository tokens go to `tokens`."""
        taken: set[str] = set()
        return [
            await self.build(item, f"resources[{i}]", taken, tokens, remote=remote)
            for i, item in enumerate(items)
        ]

    async def save_tokens(self, session_id: str, tokens: dict[str, str]) -> None:
        """Seal and store the repository tokens of a session just created."""
        if self.repositories is not None:
            for resource_id, token in tokens.items():
                await self.repositories.tokens.put(session_id, resource_id, token)

    async def forget_tokens(self, entries: list[dict[str, Any]]) -> None:
        """Drop the tokens of removed repository resources (or of a deleted session)."""
        ids = [e["id"] for e in entries if e.get("type") == "github_repository"]
        if self.repositories is not None and ids:
            await self.repositories.tokens.forget(ids)

    async def rotate_token(self, session_id: str, entry: dict[str, Any], token: str) -> None:
        """`sessions.resources.update(authorization_token=)`: later clones, fetches and
        pushes use the new token.

        Raises:
            BadRequest: not a repository, or a malformed token.
        """
        if entry.get("type") != "github_repository" or self.repositories is None:
            raise BadRequest("authorization_token: only github_repository resources can be updated")
        check_token(token, "body")
        await self.repositories.tokens.put(session_id, entry["id"], token)
