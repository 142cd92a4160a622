"""Running the HTTP server in-process: `serve_async` for the CLI and the embedded demo server.

A leaf under the command line: it composes runtime and API, and knows nothing of typer or
the demo, so both can import it without importing each other.
"""

from __future__ import annotations

import ctypes
import gc
import math
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio

from corral.config import Settings
from corral.stopping import Stopping, watch_signals


@asynccontextmanager
async def traced(settings: Settings) -> AsyncIterator[None]:
    """Export traces while the body runs, if the operator configured a collector; the last
    spans are flushed on the way out."""
    if settings.tracing_endpoint is None:
        yield
        return
    from corral.observability.tracing import configure_tracing

    provider = configure_tracing(
        settings.tracing_endpoint, service_name=settings.tracing_service_name
    )
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(provider.shutdown)


def signal_free_server(
    config: Any,
    stopping: Stopping | None = None,
    announce: Callable[[], None] | None = None,
) -> Any:
    """uvicorn's server without its own SIGINT/SIGTERM handlers: `corral.stopping` handles
    them for the whole process (uvicorn's would only stop its HTTP side, then re-raise the
    signal and kill the process before brains handed over and the runtime closed).

    Its shutdown, however started, requests `stopping` first, so that SSE streams end
    before uvicorn waits for open connections. `announce` is called once it accepts requests
    (after the lifespan started: a line saying "listening" any earlier would be a lie)."""
    import uvicorn

    class SignalFreeServer(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if announce is not None and not self.should_exit:
                announce()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if stopping is not None:
                stopping.request()
            await super().shutdown(sockets)

    return SignalFreeServer(config)


async def serve_async(
    settings: Settings,
    *,
    ready: Any = None,
    sock: socket.socket | None = None,
    announce: Callable[[], None] | None = None,
    vault_check: bool = True,
) -> None:
    """Run API + brains (+ local hands) until cancelled or stopped by a signal (see
    `corral.stopping`: streams end, brains hand their sessions over, then it returns).

    `sock`: a socket already listening (`preflight.listen`; the CLI binds before anything
    else, so a taken port is one line, not a traceback); None binds settings.host:port here.
    `announce` is called once the server accepts requests.
    """
    import uvicorn

    from corral.api.app import create_asgi
    from corral.preflight import listen
    from corral.runtime import open_runtime

    listener = sock if sock is not None else listen(settings.host, settings.port)
    with listener:  # uvicorn closes it on shutdown; this closes it when the runtime fails
        async with traced(settings), open_runtime(settings, vault_check=vault_check) as runtime:
            config = uvicorn.Config(
                create_asgi(runtime),
                host=settings.host,
                port=settings.port,
                log_level="warning",
                log_config=None,  # uvicorn's loggers go through ours (JSON lines off a tty)
                lifespan="on",
                # SSE streams end at once when stopping; other requests get the grace
                timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds),
            )
            server = signal_free_server(config, runtime.stopping, announce)
            tune_gc()
            if ready is not None:
                ready(server)

            def stop_serving() -> None:
                server.should_exit = True  # then the lifespan lets the brains hand over

            async with anyio.create_task_group() as tg:
                tg.start_soon(watch_signals, runtime.stopping, stop_serving)
                tg.start_soon(return_free_memory)
                await server.serve(sockets=[listener])
                tg.cancel_scope.cancel()


def tune_gc() -> None:
    """Keep full collections rare and cheap: with thousands of streams and sessions in
    flight, default thresholds stall the event loop for hundreds of milliseconds."""
    gc.collect()
    gc.freeze()  # everything alive after start-up is permanent: never scan it again
    gc.set_threshold(20_000, 20, 50)


TRIM_EVERY_SECONDS = 60.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None (another C library, or none found)."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


async def return_free_memory(every: float = TRIM_EVERY_SECONDS) -> None:
    """Give memory glibc holds free back to the OS, once a minute, for as long as it runs.

    Each thread that allocates (SQLite's readers and writer, anyio's worker threads) gets a
    malloc arena of its own, and glibc returns an arena's free memory only from its top: in
    the soak (`bench/soak.py`) the arenas' free-but-kept memory grew 3.5 -> 16.7 MiB in 24
    minutes while the memory in use stayed at ~22 MiB. `malloc_trim(0)` releases every free
    whole page of every arena (a few ms, on a worker thread).
    """
    trim = _malloc_trim()
    if trim is None:
        return
    while True:
        await anyio.sleep(every)
        await anyio.to_thread.run_sync(trim, 0)
