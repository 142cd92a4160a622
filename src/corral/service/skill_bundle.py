"""Skill archives: build ours from an upload (`files[]` parts, or one zip of them), unpack ours.

Sizes are the bytes actually read, after decompression: never a header's or an archive's
claim. This module must not hold a whole file in memory, nor write outside its target folder.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO

from corral.errors import BadRequest

MAX_SKILL_BYTES = 30 * 1024 * 1024
"""All of a skill's files together, uncompressed."""
MAX_SKILL_FILE_BYTES = 10 * 1024 * 1024
"""One file of a skill, uncompressed."""
MAX_SKILL_FILES = 1000
MAX_FRONT_MATTER = 64 * 1024
_CHUNK = 1024 * 1024
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_FRONT = re.compile(r"^---\s*\n(.*?)\n---\s*(\n|$)", re.S)
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError)

Opener = Callable[[], AbstractContextManager[IO[bytes]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class UploadedFile:
    """One `files[]` part: a path relative to the skill root's parent, and its bytes (a
    seekable file the caller owns, e.g. a spooled multipart part)."""

    path: str
    source: BinaryIO


@dataclass(frozen=True, slots=True, kw_only=True)
class Bundle:
    """A validated skill: its name, description and our zip of it (a temp file at offset 0)."""

    slug: str
    description: str
    archive: BinaryIO


@dataclass(slots=True)
class _Tally:
    total: int = 0
    seen: set[str] = field(default_factory=set)


def parse_front_matter(text: str) -> dict[str, str]:
    """`key: value` pairs of a SKILL.md front matter block (flat YAML subset)."""
    match = _FRONT.match(text)
    if not match:
        return {}
    out = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not line.startswith((" ", "\t")):
            out[key.strip()] = value.strip().strip("\"'")
    return out


def build(files: list[UploadedFile]) -> Bundle:
    """Validate an upload and write our archive of it (blocking: run it in a thread).

    Raises:
        BadRequest: layout, names, sizes (uncompressed, total and per file) or a bad zip.
    """
    if not files:
        raise BadRequest("files: at least one file is required")
    with ExitStack() as stack:
        try:
            entries = _entries(files, stack)
            return _write(entries)
        except _ZIP_ERRORS as exc:
            raise BadRequest(f"files: not a valid zip archive ({exc})") from exc


def _entries(files: list[UploadedFile], stack: ExitStack) -> list[tuple[PurePosixPath, Opener]]:
    """(relative path, opener) per file: the parts themselves, or the members of one zip."""
    if len(files) == 1 and _is_zip_name(files[0].path):
        return _zip_entries(files[0], stack)
    if len(files) > MAX_SKILL_FILES:
        raise BadRequest(f"files: a skill may have at most {MAX_SKILL_FILES} files")
    return [(_relative(item.path), _rewound(item.source)) for item in files]


def _is_zip_name(name: str) -> bool:
    path = PurePosixPath(name.replace("\\", "/"))
    return len(path.parts) == 1 and path.suffix.lower() == ".zip"


def _zip_entries(upload: UploadedFile, stack: ExitStack) -> list[tuple[PurePosixPath, Opener]]:
    upload.source.seek(0)
    archive = stack.enter_context(zipfile.ZipFile(upload.source))
    members = [info for info in archive.infolist() if not info.is_dir()]
    if len(members) > MAX_SKILL_FILES:
        raise BadRequest(f"files: a skill may have at most {MAX_SKILL_FILES} files")
    # A zip of the folder's contents (SKILL.md at its root) is named after the zip.
    prefix = (
        PurePosixPath(upload.path).stem if any(m.filename == "SKILL.md" for m in members) else ""
    )
    out: list[tuple[PurePosixPath, Opener]] = []
    for info in members:
        path = _relative(f"{prefix}/{info.filename}" if prefix else info.filename)
        out.append((path, _member(archive, info)))
    return out


def _member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Opener:
    return lambda: archive.open(info)


def _rewound(source: BinaryIO) -> Opener:
    @contextmanager
    def open_part() -> Iterator[IO[bytes]]:
        source.seek(0)
        yield source

    return open_part


def _relative(raw: str) -> PurePosixPath:
    path = PurePosixPath(raw.replace("\\", "/"))
    bad = any(c < " " or c == "\x7f" for c in raw)
    if bad or path.is_absolute() or ".." in path.parts or len(path.parts) < 2:
        raise BadRequest(f"files: {raw!r} must be a relative path inside one folder")
    return path


def _write(entries: list[tuple[PurePosixPath, Opener]]) -> Bundle:
    roots = {path.parts[0] for path, _ in entries}
    if len(roots) != 1:
        raise BadRequest("files: all files must be under one top-level folder")
    root = roots.pop()
    skill_md = next((o for p, o in entries if p.parts[1:] == ("SKILL.md",)), None)
    if skill_md is None:
        raise BadRequest(f"files: {root}/SKILL.md is required")
    with skill_md() as handle:
        meta = parse_front_matter(handle.read(MAX_FRONT_MATTER).decode("utf-8", "replace"))
    slug = meta.get("name") or root
    if not _SLUG.match(slug):
        raise BadRequest(f"files: skill name {slug!r} must be kebab-case (a-z, 0-9, -)")
    out = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller, who closes it
    try:
        tally = _Tally()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for path, opener in entries:
                name = str(PurePosixPath(slug, *path.parts[1:]))
                if name in tally.seen:
                    raise BadRequest(f"files: {str(path)!r} is given twice")
                tally.seen.add(name)
                with opener() as src, archive.open(name, "w") as dst:
                    _copy(src, dst, str(path), tally)
        out.seek(0)
    except BaseException:
        out.close()
        raise
    return Bundle(slug=slug, description=meta.get("description", ""), archive=out)


def _copy(src: IO[bytes], dst: IO[bytes], name: str, tally: _Tally) -> None:
    """Stream one file, counting what is really read against the per-file and total caps."""
    size = 0
    while chunk := src.read(_CHUNK):
        size += len(chunk)
        tally.total += len(chunk)
        if size > MAX_SKILL_FILE_BYTES:
            raise BadRequest(f"files: {name!r} is over {MAX_SKILL_FILE_BYTES} bytes (uncompressed)")
        if tally.total > MAX_SKILL_BYTES:
            raise BadRequest(
                f"files: a skill may be at most {MAX_SKILL_BYTES} bytes (uncompressed)"
            )
        dst.write(chunk)


def unpack(archive_path: Path, target: Path) -> None:
    """Extract one of our archives to `target` (replaced whole), with the same caps as upload
    so an archive stored before they were counted cannot fill the disk."""
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    tally = _Tally()
    with zipfile.ZipFile(archive_path) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            path = _relative(info.filename)
            dest = staging.joinpath(*path.parts)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, dest.open("xb") as dst:
                _copy(src, dst, info.filename, tally)
    staging.replace(target)
