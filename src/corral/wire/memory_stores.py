"""Memory store and memory request bodies (`types/beta/memory_store_*`, `memory_stores/*`),
and the limits of the reference: path rules, 100 KB per memory, name and description sizes.

`check_path` and `check_content` are also applied to what an agent writes under
/mnt/memory, so they must hold for hostile input: pure, bounded, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from corral.wire.common import Metadata, MetadataPatch, Strict

MAX_CONTENT_BYTES = 102_400
MAX_PATH_BYTES = 1024
MAX_SEGMENTS = 20
MAX_INSTRUCTIONS = 4096
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_SEPARATORS = ("\u2028", "\u2029")


def path_problem(path: str) -> str | None:
    """Why `path` is not a valid memory path, or None."""
    if not path.startswith("/"):
        return "must start with '/'"
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"must be at most {MAX_PATH_BYTES} bytes"
    for char in path:
        if unicodedata.category(char) in ("Cc", "Cf", "Cs") or char in _SEPARATORS:
            return f"must not contain control or format characters (U+{ord(char):04X})"
    if not unicodedata.is_normalized("NFC", path):
        return "must be in Unicode Normalization Form C"
    segments = path[1:].split("/")
    if len(segments) > MAX_SEGMENTS:
        return f"must have at most {MAX_SEGMENTS} segments"
    if any(s in ("", ".", "..") for s in segments):
        return "segments must not be empty, '.' or '..'"
    return None


def content_problem(content: str) -> str | None:
    """Why `content` cannot be a memory's content, or None."""
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        return "must be valid UTF-8 text"
    if size > MAX_CONTENT_BYTES:
        return f"is {size} bytes; a memory holds at most {MAX_CONTENT_BYTES} bytes (100 KB)"
    return None


def _valid_path(value: str) -> str:
    problem = path_problem(value)
    if problem:
        raise ValueError(f"path {problem}")
    return value


def _valid_content(value: str) -> str:
    problem = content_problem(value)
    if problem:
        raise ValueError(f"content {problem}")
    return value


def _valid_name(value: str) -> str:
    if any(unicodedata.category(c) == "Cc" for c in value):
        raise ValueError("name must not contain control characters")
    return value


def _valid_sha(value: str) -> str:
    if not _SHA256.match(value):
        raise ValueError("must be 64 lowercase hexadecimal characters")
    return value


MemoryPath = Annotated[str, AfterValidator(_valid_path)]
Content = Annotated[str, AfterValidator(_valid_content)]
StoreName = Annotated[str, Field(min_length=1, max_length=255), AfterValidator(_valid_name)]
Description = Annotated[str, Field(max_length=1024)]
Sha256 = Annotated[str, AfterValidator(_valid_sha)]


def valid_sha256(value: str) -> bool:
    """Whether `value` is a lowercase hex SHA-256 digest."""
    return bool(_SHA256.match(value))


class MemoryStoreCreate(Strict):
    """POST /v1/memory_stores."""

    name: StoreName
    description: Description | None = None
    metadata: Metadata | None = None


class MemoryStoreUpdate(Strict):
    """POST /v1/memory_stores/{id}."""

    name: StoreName | None = None
    description: Description | None = None
    metadata: MetadataPatch | None = None


class MemoryCreate(Strict):
    """POST /v1/memory_stores/{id}/memories."""

    path: MemoryPath
    content: Content


class Precondition(Strict):
    """Optimistic lock on the memory's current content."""

    type: Literal["content_sha256"]
    content_sha256: Sha256


class MemoryUpdate(Strict):
    """POST /v1/memory_stores/{id}/memories/{memory_id}."""

    content: Content | None = None
    path: MemoryPath | None = None
    precondition: Precondition | None = None


def slug(name: str) -> str:
    """The mount directory name: lowercased, each run of non-`[a-z0-9]` becomes one `-`
    (ends trimmed; an empty result becomes `memory`)."""
    text = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return text or "memory"
