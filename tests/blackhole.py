"""A loopback TCP proxy that can black-hole its traffic, standing between Corral and
PostgreSQL in tests of a lost database.

While black-holed, connections are still accepted and every socket stays open, but no byte
moves in either direction: the bytes wait where they are (in the kernel's buffers or in the
pump that read them) and are delivered when the hole closes, like packets a network
retransmits once it heals. A write the database receives only then must not commit if the
client was already told it failed.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType


class BlackHoleProxy:
    """Forwards 127.0.0.1:`port` to `upstream` until `black_hole()`, again after `heal()`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="blackhole-accept", daemon=True).start()

    def black_hole(self) -> None:
        """Stop moving bytes; keep every socket open and keep accepting."""
        self._flowing.clear()

    def heal(self) -> None:
        """Deliver what waited and forward again."""
        self._flowing.set()

    def close(self) -> None:
        """Close the listener and every connection."""
        self._flowing.set()
        self._server.close()
        with self._lock:
            for sock in self._sockets:
                _shut(sock)

    def __enter__(self) -> BlackHoleProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                self._flowing.wait()
                data = src.recv(65536)
                if not data:
                    break
                self._flowing.wait()  # read just before the hole opened: held, not lost
                dst.sendall(data)
        except OSError:
            pass  # a reset on either side ends this connection
        finally:
            _shut(src)
            _shut(dst)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
