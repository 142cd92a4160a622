"""The file tools (read, write, edit, glob, grep) with the SDK reference toolset's messages/limits.

They act through a `View` (identity in a sandbox, a path map in ScriptedHands). Stdlib only; no
confinement here: the sandbox, not this code, is the security boundary.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Mapping, Sequence
from typing import Any

MAX_FILE_BYTES = 256 * 1024
MAX_IMAGE_BASE64_BYTES = 5 * 1024 * 1024
MAX_PDF_BYTES = 20 * 1024 * 1024
GREP_OUTPUT_LIMIT = 100 * 1024
GREP_MAX_LINE_LENGTH = 2000
GLOB_RESULT_LIMIT = 200
WALK_MAX_ENTRIES = 50_000
MEDIA_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".pdf": "application/pdf",
}


class ToolFailure(Exception):
    """A tool error the model should see (becomes an `is_error` result)."""


class Binary:
    """An image or PDF `read` returns as a content block."""

    __slots__ = ("data", "media_type")

    def __init__(self, media_type: str, data: bytes) -> None:
        self.media_type = media_type
        self.data = data


class View:
    """Maps sandbox paths to openable paths. `mounts`: (sandbox_prefix, real_prefix, read_only)."""

    def __init__(
        self, workdir: str, mounts: Sequence[tuple[str, str, bool]] = (), *, strict: bool = False
    ) -> None:
        self.workdir = workdir
        self.mounts = sorted(mounts, key=lambda m: len(m[0]), reverse=True)
        self.strict = strict
        """True: a path under no mount does not exist (ScriptedHands); False: identity."""

    def sandbox_path(self, p: str) -> str:
        return posixpath.normpath(posixpath.join(self.workdir, p))

    def real(self, sandbox_path: str) -> str:
        for prefix, real, _ in self.mounts:
            if _under(sandbox_path, prefix):
                return real + sandbox_path[len(prefix) :]
        if self.strict:
            raise ToolFailure(f"path {sandbox_path!r} is outside the sandbox's directories")
        return sandbox_path

    def unreal(self, real_path: str) -> str:
        for prefix, real, _ in self.mounts:
            if _under(real_path, real):
                return prefix + real_path[len(real) :]
        return real_path

    def read_only_root(self, sandbox_path: str) -> str | None:
        for prefix, _, read_only in self.mounts:
            if _under(sandbox_path, prefix):
                return prefix if read_only else None
        return None


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _reason(e: OSError) -> str:
    names = {
        errno.ENOENT: "no such file or directory",
        errno.ENOTDIR: "not a directory",
        errno.EISDIR: "is a directory",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EEXIST: "file already exists",
        errno.ELOOP: "too many levels of symbolic links",
        errno.EROFS: "read-only file system",
        errno.ENOSPC: "no space left on device",
    }
    return names.get(e.errno or 0, (e.strerror or "i/o error").lower())


def _fs_error(op: str, file_path: str, e: OSError) -> ToolFailure:
    return ToolFailure(f"{op}: {file_path}: {_reason(e)}")


def _path_arg(op: str, file_path: object) -> str:
    if not isinstance(file_path, str) or not file_path:
        raise ToolFailure(f"{op}: file_path must be a non-empty string")
    return file_path


def _target(view: View, op: str, file_path: str, *, writing: bool = False) -> str:
    path = view.sandbox_path(file_path)
    root = view.read_only_root(path) if writing else None
    if root is not None:
        raise ToolFailure(f"{op}: {file_path} is inside read-only directory {root}")
    return view.real(path)


def _regular_size(op: str, file_path: str, real: str) -> int:
    try:
        st = os.stat(real)
    except OSError as e:
        raise _fs_error(op, file_path, e) from e
    if not stat.S_ISREG(st.st_mode):
        raise ToolFailure(f"{op}: {file_path}: not a regular file")
    return st.st_size


def _read_utf8(op: str, file_path: str, real: str, hint: str) -> str:
    try:
        with open(real, "rb") as f:
            return f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolFailure(f"{op}: {file_path}: not valid UTF-8 text ({hint})") from e
    except OSError as e:
        raise _fs_error(op, file_path, e) from e


def read(view: View, file_path: object, view_range: object = None) -> str | Binary:
    """Whole file (≤ 256 KiB), a 1-based inclusive line range, or an image/PDF block."""
    file_path = _path_arg("read", file_path)
    real = _target(view, "read", file_path)
    if view_range is not None and (
        not isinstance(view_range, list)
        or len(view_range) != 2
        or not all(isinstance(n, int) for n in view_range)
    ):
        raise ToolFailure("read: view_range must be [start_line, end_line]")
    size = _regular_size("read", file_path, real)
    media = MEDIA_TYPES.get(posixpath.splitext(real)[1].lower())
    if media is not None:
        if view_range:
            raise ToolFailure("read: view_range is not supported for image/PDF files")
        limit = MAX_PDF_BYTES if media == "application/pdf" else MAX_IMAGE_BASE64_BYTES // 4 * 3
        if size > limit:
            raise ToolFailure(
                f"read: {file_path} is {size} bytes, exceeds {limit}-byte limit "
                "for image/PDF files."
            )
        with open(real, "rb") as f:
            return Binary(media, f.read())
    if size > MAX_FILE_BYTES and not view_range:
        raise ToolFailure(
            f"read: {file_path} is {size} bytes, exceeds {MAX_FILE_BYTES}-byte limit. Use the "
            "view_range parameter to read specific line ranges, e.g. view_range: [1, 500]."
        )
    if view_range:
        return _read_lines(file_path, real, view_range[0], view_range[1]) or "(no lines in range)"
    text = _read_utf8("read", file_path, real, "binary files are only supported for image/PDF")
    return text or "(empty file)"


def _read_lines(file_path: str, real: str, start_line: int, end_line: int) -> str:
    start = max(0, start_line - 1)
    end = end_line if end_line > 0 else None
    picked: list[bytes] = []
    total = 0
    with open(real, "rb") as f:
        for i, line in enumerate(f):
            if end is not None and i >= end:
                break
            if i < start:
                continue
            total += len(line)
            if total > MAX_FILE_BYTES:
                raise ToolFailure(
                    f"read: view_range [{start_line}, {end_line}] of {file_path} exceeds "
                    f"{MAX_FILE_BYTES}-byte limit. Narrow the view_range to read a smaller portion."
                )
            picked.append(line)
    try:
        return b"".join(picked).decode("utf-8").removesuffix("\n")
    except UnicodeDecodeError as e:
        raise ToolFailure(f"read: {file_path}: not valid UTF-8 text") from e


def write(view: View, file_path: object, content: object) -> str:
    """Create or overwrite a file, making parent directories."""
    file_path = _path_arg("write", file_path)
    real = _target(view, "write", file_path, writing=True)
    if not isinstance(content, str):
        raise ToolFailure("write: content must be a string")
    data = content.encode("utf-8")
    try:
        os.makedirs(posixpath.dirname(real) or ".", exist_ok=True)
        with open(real, "wb") as f:
            f.write(data)
    except OSError as e:
        raise _fs_error("write", file_path, e) from e
    return f"wrote {len(data)} bytes to {file_path}"


def edit(
    view: View,
    file_path: object,
    old_string: object,
    new_string: object,
    replace_all: object = None,
) -> str:
    """Replace `old_string` (unique unless `replace_all`) with `new_string`."""
    file_path = _path_arg("edit", file_path)
    real = _target(view, "edit", file_path, writing=True)
    if not isinstance(old_string, str) or not isinstance(new_string, str):
        raise ToolFailure("edit: old_string and new_string must be strings")
    if not old_string:
        raise ToolFailure("edit: old_string must not be empty")
    size = _regular_size("edit", file_path, real)
    if size > MAX_FILE_BYTES:
        raise ToolFailure(
            f"edit: {file_path} is {size} bytes, exceeds {MAX_FILE_BYTES}-byte limit. "
            "The edit tool loads the whole file and cannot modify a file this large."
        )
    text = _read_utf8("edit", file_path, real, "cannot edit binary files")
    count = text.count(old_string)
    if count == 0:
        raise ToolFailure(f"edit: old_string not found in {file_path}")
    if not replace_all and count > 1:
        raise ToolFailure(f"edit: old_string appears {count} times in {file_path} (must be unique)")
    updated = text.replace(old_string, new_string, -1 if replace_all else 1)
    try:
        with open(real, "wb") as f:
            f.write(updated.encode("utf-8"))
    except OSError as e:
        raise _fs_error("edit", file_path, e) from e
    return f"edited {file_path} ({count if replace_all else 1} replacement(s))"


def glob(view: View, pattern: object, path: object = None) -> str:
    """Paths matching a `**`-aware pattern under `path` (default: workdir), newest first."""
    from itertools import islice
    from pathlib import Path, PurePosixPath

    if not isinstance(pattern, str) or not pattern:
        raise ToolFailure("glob: pattern must be a non-empty string")
    if pattern.startswith("/"):
        raise ToolFailure(
            "glob: absolute pattern not permitted; pass a relative pattern (and optionally path)"
        )
    if ".." in PurePosixPath(pattern).parts:
        raise ToolFailure("glob: '..' is not permitted in the pattern")
    root = _search_root(view, "glob", path)
    try:
        matches = list(islice(Path(root).glob(pattern), WALK_MAX_ENTRIES))
    except (ValueError, OSError) as e:
        raise ToolFailure(f"glob: {e}") from e
    if not matches:
        return "no matches"
    matches.sort(key=_mtime, reverse=True)
    return "\n".join(view.unreal(str(m)) for m in matches[:GLOB_RESULT_LIMIT])


def _mtime(p: Any) -> float:
    try:
        return float(os.stat(p).st_mtime)
    except OSError:
        return 0.0


def _search_root(view: View, op: str, path: object) -> str:
    if path is None or path == "":
        return view.real(view.workdir)
    if not isinstance(path, str):
        raise ToolFailure(f"{op}: path must be a string")
    return view.real(view.sandbox_path(path))


def grep(view: View, pattern: object, path: object = None) -> str:
    """`path:line:text` for lines matching a Python regex; skips binary files and symlinks."""
    import re

    if not isinstance(pattern, str):
        raise ToolFailure("grep: pattern must be a string")
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise ToolFailure(f"grep: invalid regex: {e}") from e
    root = _search_root(view, "grep", path)
    hits: list[str] = []
    budget = [GREP_OUTPUT_LIMIT]
    if os.path.isfile(root):
        _grep_file(view, rx, root, hits, budget)
    else:
        _grep_tree(view, rx, root, hits, budget)
    return "\n".join(hits) if hits else "no matches"


def _grep_tree(view: View, rx: Any, root: str, hits: list[str], budget: list[int]) -> None:
    seen = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [
            d
            for d in dirnames
            if d not in (".git", "node_modules") and not os.path.islink(os.path.join(dirpath, d))
        ]
        for name in filenames:
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            seen += 1
            if seen > WALK_MAX_ENTRIES or not _grep_file(view, rx, full, hits, budget):
                return


def _grep_file(view: View, rx: Any, full: str, hits: list[str], budget: list[int]) -> bool:
    shown = view.unreal(full)
    try:
        with open(full, "rb") as f:
            if b"\x00" in f.read(512):
                return True
            f.seek(0)
            for i, raw in enumerate(f, 1):
                if len(raw) > GREP_MAX_LINE_LENGTH:
                    continue
                line = raw.decode(errors="replace").rstrip("\r\n")
                if not rx.search(line):
                    continue
                entry = f"{shown}:{i}:{line}"
                budget[0] -= len(entry) + 1
                if budget[0] < 0:
                    hits.append(f"[output truncated at {GREP_OUTPUT_LIMIT} bytes]")
                    return False
                hits.append(entry)
    except OSError:
        pass
    return True


def run(view: View, name: str, tool_input: Mapping[str, Any]) -> str | Binary:
    """Dispatch one file tool call.

    Raises:
        ToolFailure: the tool failed; the message is for the model.
    """
    i = tool_input
    if name == "read":
        return read(view, i.get("file_path"), i.get("view_range"))
    if name == "write":
        return write(view, i.get("file_path"), i.get("content"))
    if name == "edit":
        args = (i.get("file_path"), i.get("old_string"), i.get("new_string"), i.get("replace_all"))
        return edit(view, *args)
    if name == "glob":
        return glob(view, i.get("pattern"), i.get("path"))
    if name == "grep":
        return grep(view, i.get("pattern"), i.get("path"))
    raise ToolFailure(f"unknown tool: {name}")
