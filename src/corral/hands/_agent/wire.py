"""Framing between host and in-sandbox agent, stdlib only: host -> agent `<len>\\n` + marshal,
agent -> host `<flags> <kind> <media> <len>\\n` + raw body. The host parses only that fixed
header and never unmarshals anything a sandbox wrote.
"""

from __future__ import annotations

import marshal
import os
from typing import Any

MARSHAL_VERSION = 4
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_RESPONSE_BYTES = 48 * 1024 * 1024
MAX_HEADER_BYTES = 256
KINDS = ("text", "image", "document", "ready")
FLAG_ERROR = 1


def encode_request(obj: dict[str, Any]) -> bytes:
    """A host -> agent frame."""
    body = marshal.dumps(obj, MARSHAL_VERSION)
    return b"%d\n" % len(body) + body


def encode_response(kind: str, body: bytes, *, is_error: bool = False, media: str = "-") -> bytes:
    """An agent -> host frame."""
    flags = FLAG_ERROR if is_error else 0
    return b"%d %s %s %d\n" % (flags, kind.encode(), media.encode(), len(body)) + body


def parse_response_header(line: bytes) -> tuple[str, str, bool, int]:
    """`(kind, media_type, is_error, body_length)` of an agent frame header.

    Raises:
        ValueError: the header is malformed (the sandbox is then treated as broken).
    """
    parts = line.decode("ascii").split()
    if len(parts) != 4:
        raise ValueError(f"bad frame header {line[:80]!r}")
    flags, kind, media, length = int(parts[0]), parts[1], parts[2], int(parts[3])
    if kind not in KINDS or not 0 <= length <= MAX_RESPONSE_BYTES or flags not in (0, 1):
        raise ValueError(f"bad frame header {line[:80]!r}")
    return kind, media, bool(flags & FLAG_ERROR), length


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
