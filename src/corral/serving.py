"""Running the HTTP server in-process: `serve_async` for the CLI and the embedded demo server.

A leaf under the command line: it composes runtime and API, and knows nothing of typer or
the demo, so both can import it without importing each other.
"""

from __future__ import annotations

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
                await server.serve(sockets=[listener])
                tg.cancel_scope.cancel()


def tune_gc() -> None:
    """Keep full collections rare and cheap: with thousands of streams and sessions in
    flight, default thresholds stall the event loop for hundreds of milliseconds."""
    gc.collect()
    gc.freeze()  # everything alive after start-up is permanent: never scan it again
    gc.set_threshold(20_000, 20, 50)
