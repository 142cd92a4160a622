"""Skill bundles: create from uploaded files, version, download as zip, materialise for mounts.

Archives are built and unpacked by `service.skill_bundle` (sizes counted uncompressed); this module
keeps the records and must not read an upload whole into memory.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread

from corral.errors import BadRequest, Conflict, NotFound
from corral.files.blobs import BlobStore
from corral.ids import new_id, now_rfc3339
from corral.service.common import check_limit, page_envelope
from corral.service.skill_bundle import (
    MAX_FRONT_MATTER,
    MAX_SKILL_BYTES,
    Bundle,
    UploadedFile,
    build,
    parse_front_matter,
    unpack,
)
from corral.store.base import Page, Resource, Store

__all__ = ["MAX_SKILL_BYTES", "SkillMount", "SkillService", "UploadedFile"]
# Our archive of at most MAX_SKILL_BYTES: deflate may add a little per file, never this much.
_MAX_ARCHIVE_BYTES = 2 * MAX_SKILL_BYTES


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillMount:
    """A skill version ready to bind into a sandbox."""

    name: str
    description: str
    host_dir: Path


class SkillService:
    """Skills and their versions."""

    def __init__(
        self,
        store: Store,
        blobs: BlobStore,
        unpack_root: Path,
        anthropic: Mapping[str, Path] | None = None,
    ) -> None:
        self.store = store
        self.blobs = blobs
        self.unpack_root = unpack_root
        self.anthropic = dict(anthropic or {})
        """`[skills.anthropic]`: Anthropic skill ids served from local directories."""

    async def create(self, files: list[UploadedFile], display_name: str | None) -> dict[str, Any]:
        """A new skill with its first version."""
        bundle = await anyio.to_thread.run_sync(build, files)
        now = now_rfc3339()
        skill: dict[str, Any] = {
            "id": new_id("skill"),
            "type": "skill",
            "display_name": display_name or bundle.slug,
            "source": {"type": "custom"},
            "latest_version_id": None,
            "created_at": now,
            "updated_at": now,
        }
        await self.store.insert_resource(
            Resource(kind="skill", id=skill["id"], body=skill, created_at=now)
        )
        version = await self._add_version(skill, bundle)
        return {**skill, "latest_version_id": version["id"]}

    async def add_version(self, skill_id: str, files: list[UploadedFile]) -> dict[str, Any]:
        """A new version; its slug must match the skill's."""
        skill = await self._skill(skill_id)
        bundle = await anyio.to_thread.run_sync(build, files)
        latest = await self.version(skill_id, "latest")
        if latest["name"] != bundle.slug:
            bundle.archive.close()
            raise Conflict(
                f"files: this skill is named {latest['name']!r}, not {bundle.slug!r}",
                error_code="skill_name_taken",
            )
        return await self._add_version(skill, bundle)

    async def _add_version(self, skill: dict[str, Any], bundle: Bundle) -> dict[str, Any]:
        with bundle.archive:
            blob = await self.blobs.put(bundle.archive, max_bytes=_MAX_ARCHIVE_BYTES)
        now = now_rfc3339()
        version = {
            "id": new_id("skillver"),
            "type": "skill_version",
            "skill_id": skill["id"],
            "name": bundle.slug,
            "description": bundle.description,
            "created_at": now,
            "sha256": blob.sha256,
        }
        await self.store.insert_resource(
            Resource(kind="skill_version", id=version["id"], body=version, created_at=now)
        )
        updated = {**skill, "latest_version_id": version["id"], "updated_at": now}
        await self.store.replace_resource(
            Resource(kind="skill", id=skill["id"], body=updated, created_at=skill["created_at"])
        )
        return _public(version)

    async def get(self, skill_id: str) -> dict[str, Any]:
        """The skill."""
        return await self._skill(skill_id)

    async def list_skills(
        self, limit: int | None, page: str | None, source: str | None
    ) -> dict[str, Any]:
        """A page of skills (only custom skills exist on this server)."""
        size = check_limit(limit, default=20, maximum=1000)
        if source not in (None, "custom"):
            return {"data": [], "next_page": None}
        rows = await self.store.list_resources("skill", Page(limit=size, after_id=page))
        return page_envelope(rows, size, lambda r: r.body, lambda r: r.id)

    async def delete(self, skill_id: str) -> dict[str, Any]:
        """Delete the skill and every version."""
        await self._skill(skill_id)
        for version in await self._versions(skill_id):
            await self.store.delete_resource("skill_version", version["id"])
        await self.store.delete_resource("skill", skill_id)
        return {"id": skill_id, "type": "skill_deleted"}

    async def version(self, skill_id: str, version: str) -> dict[str, Any]:
        """A version by id, or `latest`."""
        skill = await self._skill(skill_id)
        version_id = skill["latest_version_id"] if version == "latest" else version
        row = await self.store.get_resource("skill_version", str(version_id))
        if row is None or row.body["skill_id"] != skill_id:
            raise NotFound(f"skill {skill_id} has no version {version!r}")
        return _public(row.body)

    async def versions(self, skill_id: str, limit: int | None, page: str | None) -> dict[str, Any]:
        """Versions, oldest first."""
        size = check_limit(limit, default=20, maximum=1000)
        found = await self._versions(skill_id)
        if page:
            ids = [v["id"] for v in found]
            if page not in ids:
                raise BadRequest("page: invalid cursor")
            found = found[ids.index(page) + 1 :]
        shown = found[:size]
        return {
            "data": [_public(v) for v in shown],
            "next_page": shown[-1]["id"] if len(found) > size else None,
        }

    async def delete_version(self, skill_id: str, version: str) -> dict[str, Any]:
        """Delete one version; the latest pointer moves back (the last one cannot go)."""
        target = await self.version(skill_id, version)
        remaining = [v for v in await self._versions(skill_id) if v["id"] != target["id"]]
        if not remaining:
            raise BadRequest("version: cannot delete the only version; delete the skill")
        await self.store.delete_resource("skill_version", target["id"])
        skill = await self._skill(skill_id)
        updated = {**skill, "latest_version_id": remaining[-1]["id"], "updated_at": now_rfc3339()}
        await self.store.replace_resource(
            Resource(kind="skill", id=skill_id, body=updated, created_at=skill["created_at"])
        )
        return {"id": target["id"], "type": "skill_version_deleted"}

    async def archive_bytes(self, skill_id: str, version: str) -> Any:
        """The version's zip as a byte stream."""
        target = await self.version(skill_id, version)
        row = await self.store.get_resource("skill_version", target["id"])
        assert row is not None
        return self.blobs.iter_bytes(row.body["sha256"])

    async def resolve(self, ref_type: str, skill_id: str, version: str | None) -> str:
        """The concrete version id an agent pins (`latest` resolved now)."""
        if ref_type == "anthropic":
            if skill_id not in self.anthropic:
                mapped = sorted(self.anthropic) or "none"
                raise BadRequest(
                    f"skills: anthropic skill {skill_id!r} is not available on this server: "
                    "the operator maps Anthropic skill ids to local skill directories in the "
                    f"skills.anthropic setting of corral.toml (mapped: {mapped}); or upload it "
                    "as a custom skill"
                )
            return version or "latest"  # the operator's directory is the version served
        try:
            return str((await self.version(skill_id, version or "latest"))["id"])
        except NotFound as exc:
            raise BadRequest(f"skills: {exc.message}") from exc

    async def materialize(self, skill_id: str, version_id: str) -> SkillMount:
        """Unpack a version once under the data dir; returns what to mount and to tell the model.

        An Anthropic skill (an id of `skills.anthropic`; custom ids all start with `skill_`)
        is its operator's directory, mounted as it is."""
        if skill_id in self.anthropic:
            return await anyio.to_thread.run_sync(_local_skill, skill_id, self.anthropic[skill_id])
        row = await self.store.get_resource("skill_version", version_id)
        if row is None:
            raise NotFound(f"skill version {version_id} not found")
        body = row.body
        target = self.unpack_root / version_id
        if not (target / body["name"]).is_dir():
            await anyio.to_thread.run_sync(unpack, self.blobs.path(body["sha256"]), target)
        return SkillMount(
            name=body["name"], description=body["description"], host_dir=target / body["name"]
        )

    async def describe(self, skill_id: str, version_id: str) -> tuple[str, str]:
        """(name, description) for the system prompt."""
        mount = await self.materialize(skill_id, version_id)
        return mount.name, mount.description

    async def _skill(self, skill_id: str) -> dict[str, Any]:
        row = await self.store.get_resource("skill", skill_id)
        if row is None:
            raise NotFound(f"skill {skill_id} not found")
        return row.body

    async def _versions(self, skill_id: str) -> list[dict[str, Any]]:
        rows = await self.store.list_resources(
            "skill_version", Page(limit=10_000, include_archived=True)
        )
        return [r.body for r in rows if r.body["skill_id"] == skill_id]


_MOUNT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}\Z")


def _local_skill(skill_id: str, path: Path) -> SkillMount:
    """An operator's skill directory: named by its SKILL.md front matter (else its id)."""
    try:
        with (path / "SKILL.md").open("rb") as handle:
            meta = parse_front_matter(handle.read(MAX_FRONT_MATTER).decode("utf-8", "replace"))
    except OSError as exc:
        raise NotFound(f"anthropic skill {skill_id!r}: {path}/SKILL.md is unreadable") from exc
    name = meta.get("name") or skill_id
    if not _MOUNT_NAME.match(name):  # it names a directory under /mnt/skills
        name = skill_id
    return SkillMount(name=name, description=meta.get("description", ""), host_dir=path)


def _public(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "sha256"}
