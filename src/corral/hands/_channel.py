"""The host's end of the socket to one sandbox's agent: sends requests, reads checked answers.

Everything read here was written by the sandbox: the header is bounded before it is parsed, a
body is bounded by its kind before a byte of it is allocated, and a frame whose id is not the
one the host sent is refused. This module never interprets a body and never retries; any
refusal means the sandbox is out of step and must be killed by the caller.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
from dataclasses import dataclass

from corral.hands._agent.wire import MAX_HEADER_BYTES, parse_response_header


class ProtocolError(ValueError):
    """The agent sent something that is not the answer to the pending request."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One answer from the agent."""

    kind: str
    media: str
    is_error: bool
    body: bytes


def new_id() -> str:
    """A request id no process in the sandbox can predict."""
    return secrets.token_hex(8)


class Channel:
    """Owns the host end of a connected stream socket (closed by `close`)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._buf = bytearray()

    def fileno(self) -> int:
        return self._sock.fileno()

    async def send(self, data: bytes) -> None:
        """Write all of `data`. Raises OSError if the agent is gone."""
        await asyncio.get_running_loop().sock_sendall(self._sock, data)

    async def read_frame(self, frame_id: str) -> Frame:
        """The next frame, which must answer request `frame_id`.

        Raises:
            EOFError: the agent closed the channel (it died).
            ProtocolError: malformed, oversized or out-of-step frame.
        """
        header = await self._read_header()
        try:
            got, kind, media, is_error, length = parse_response_header(header)
        except (ValueError, UnicodeDecodeError) as e:
            raise ProtocolError(str(e)) from None
        if got != frame_id:
            raise ProtocolError(f"answer to request {got!r} while {frame_id!r} was pending")
        return Frame(kind, media, is_error, await self._read_exactly(length))

    async def _recv(self, n: int) -> bytes:
        data = await asyncio.get_running_loop().sock_recv(self._sock, n)
        if not data:
            raise EOFError
        return data

    async def _read_header(self) -> bytes:
        # Never ask for more than the header's room: bytes past the newline are body bytes,
        # kept in the buffer, and at most MAX_HEADER_BYTES of them.
        while (i := self._buf.find(b"\n")) < 0:
            room = MAX_HEADER_BYTES - len(self._buf)
            if room <= 0:
                raise ProtocolError("frame header too long")
            self._buf += await self._recv(room)
        header = bytes(self._buf[:i])
        del self._buf[: i + 1]
        return header

    async def _read_exactly(self, n: int) -> bytes:
        body = bytearray(n)  # n was bounded by the frame's kind
        view = memoryview(body)
        have = min(len(self._buf), n)
        view[:have] = self._buf[:have]
        del self._buf[:have]
        loop = asyncio.get_running_loop()
        while have < n:
            got = await loop.sock_recv_into(self._sock, view[have:])
            if not got:
                raise EOFError
            have += got
        return bytes(body)

    def close(self) -> None:
        self._sock.close()
