"""Relays 127.0.0.1:PORT inside the sandbox's empty network namespace to the host's egress proxy.

The proxy's unix socket is bind-mounted into the sandbox; this makes it reachable as a plain
`http_proxy`. It enforces nothing: the policy lives in the proxy outside the sandbox.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


def start(port: int, socket_path: str) -> None:
    """Listen on 127.0.0.1:`port` and relay every connection to `socket_path` (daemon threads)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(128)
    threading.Thread(target=_accept_loop, args=(server, socket_path), daemon=True).start()


def _accept_loop(server: socket.socket, socket_path: str) -> None:
    """One proxy connection per client connection, never more (no retries, no pooling), so
    the sandbox cannot use this relay to amplify; the proxy enforces the budgets. Running out
    of descriptors or threads (the sandbox's own limits) drops that client, never the loop."""
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            time.sleep(0.1)  # EMFILE and the like: the sandbox's own limit, wait for a free fd
            continue
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError:
            client.close()
            continue
        try:
            upstream.connect(socket_path)
            pair = _Pair(client, upstream)
            threading.Thread(target=pair.pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pair.pump, args=(upstream, client), daemon=True).start()
        except (OSError, RuntimeError):  # RuntimeError: no thread could be started
            client.close()
            upstream.close()


class _Pair:
    """Two sockets relayed both ways; closed once both directions have finished."""

    def __init__(self, a: socket.socket, b: socket.socket) -> None:
        self._socks = (a, b)
        self._open = 2
        self._lock = threading.Lock()

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)
        with self._lock:
            self._open -= 1
            done = self._open == 0
        if done:
            for s in self._socks:
                s.close()
