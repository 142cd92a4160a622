"""Framing between host and in-sandbox agent, stdlib only: host -> agent `<len>\\n` + marshal,
agent -> host `<id> <flags> <kind> <media> <len>\\n` + raw body.

Every request carries an `id` the host chose at random; the agent echoes it in its answer, so
the host can refuse a frame that does not answer the call it made. The host parses only the
fixed header, bounds each body by its kind before reading it, and never unmarshals anything a
sandbox wrote. Frames travel over a dedicated socket, never over a command's stdio.
"""

from __future__ import annotations

import marshal
import os
import string
from typing import Any, TypeGuard

from .filetools import MAX_IMAGE_BASE64_BYTES, MAX_PDF_BYTES

MARSHAL_VERSION = 4
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 256
MAX_TEXT_BYTES = 4 * 1024 * 1024
"""Text bodies are already capped by the tools (bash at `output_bytes`, read at 256 KiB);
the agent truncates anything longer and the host refuses it."""
MAX_BODY_BYTES = {
    "text": MAX_TEXT_BYTES,
    "image": MAX_IMAGE_BASE64_BYTES // 4 * 3,
    "document": MAX_PDF_BYTES,
    "ready": 64,
}
"""The largest body the host reads for each kind of frame."""
FLAG_ERROR = 1
MAX_ID_LENGTH = 64
_ID_CHARS = frozenset(string.hexdigits.lower())


def encode_request(obj: dict[str, Any]) -> bytes:
    """A host -> agent frame."""
    body = marshal.dumps(obj, MARSHAL_VERSION)
    return b"%d\n" % len(body) + body


def encode_response(
    frame_id: str, kind: str, body: bytes, *, is_error: bool = False, media: str = "-"
) -> bytes:
    """An agent -> host frame answering request `frame_id`."""
    flags = FLAG_ERROR if is_error else 0
    header = b"%s %d %s %s %d\n" % (
        frame_id.encode(),
        flags,
        kind.encode(),
        media.encode(),
        len(body),
    )
    return header + body


def valid_id(frame_id: object) -> TypeGuard[str]:
    """A request id is 1-64 lowercase hex digits (it goes into a frame header verbatim)."""
    return (
        isinstance(frame_id, str)
        and 0 < len(frame_id) <= MAX_ID_LENGTH
        and _ID_CHARS.issuperset(frame_id)
    )


def parse_response_header(line: bytes) -> tuple[str, str, str, bool, int]:
    """`(id, kind, media_type, is_error, body_length)` of an agent frame header.

    Raises:
        ValueError: the header is malformed or announces a body larger than its kind allows
            (the sandbox is then treated as broken).
    """
    parts = line.decode("ascii").split()
    if len(parts) != 5 or not valid_id(parts[0]):
        raise ValueError(f"bad frame header {line[:80]!r}")
    frame_id, flags, kind, media, length = (
        parts[0],
        int(parts[1]),
        parts[2],
        parts[3],
        int(parts[4]),
    )
    if kind not in MAX_BODY_BYTES or not 0 <= length <= MAX_BODY_BYTES[kind] or flags not in (0, 1):
        raise ValueError(f"bad frame header {line[:80]!r}")
    return frame_id, kind, media, bool(flags & FLAG_ERROR), length


class FrameReader:
    """Blocking reader of host -> agent frames from a file descriptor."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = bytearray()

    def read_request(self) -> dict[str, Any] | None:
        """The next request, or None at end of input."""
        line = self._read_until_newline()
        if line is None:
            return None
        length = int(line)
        if not 0 <= length <= MAX_REQUEST_BYTES:
            raise ValueError("request too large")
        body = self._read_exactly(length)
        if body is None:
            return None
        obj = marshal.loads(body)
        if not isinstance(obj, dict):
            raise ValueError("request is not a dict")
        return obj

    def _fill(self) -> bool:
        chunk = os.read(self._fd, 1 << 16)
        self._buf += chunk
        return bool(chunk)

    def _read_until_newline(self) -> bytes | None:
        while (i := self._buf.find(b"\n")) < 0:
            if len(self._buf) > 32 or not self._fill():
                return None
        line = bytes(self._buf[:i])
        del self._buf[: i + 1]
        return line

    def _read_exactly(self, n: int) -> bytes | None:
        while len(self._buf) < n:
            if not self._fill():
                return None
        body = bytes(self._buf[:n])
        del self._buf[:n]
        return body


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to a blocking `fd`."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
