"""A loopback forward proxy that only tunnels (`CONNECT host:port`), counting its tunnels.

Stands in for a corporate proxy in front of the model API. It runs its own event loop in a
background thread, so sync tests (a server subprocess driven through the SDK) and async tests
can both use it. It connects only to loopback: a test can never send traffic elsewhere.

    with ConnectProxy() as proxy:
        env = {"HTTPS_PROXY": proxy.url}
        ...
        assert proxy.tunnels == ["127.0.0.1:8443"]
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class ConnectProxy:
    """The proxy on 127.0.0.1; `tunnels` lists each CONNECT target it opened, in order."""

    tunnels: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    """Request lines it refused (anything but a CONNECT to loopback)."""
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ConnectProxy:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        listening = asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._server = asyncio.run_coroutine_threadsafe(listening, self._loop).result(timeout=10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def close() -> None:
            server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        loop.close()
        self._loop = self._server = None

    def __enter__(self) -> ConnectProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, target, _ = (line.split(" ") + ["", ""])[:3]
            host, _, port = target.rpartition(":")
            if method != "CONNECT" or host.strip("[]") not in _LOOPBACK or not port.isdigit():
                self.refused.append(line)
                writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                return
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
            self.tunnels.append(target)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            with contextlib.suppress(OSError):
                writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()
