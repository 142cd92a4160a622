"""Running the HTTP server in-process: `serve_async` for the CLI and the embedded demo server.

A leaf under the command line: it composes runtime and API, and knows nothing of typer or
the demo, so both can import it without importing each other.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from corral.config import Settings


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


async def serve_async(settings: Settings, *, ready: Any = None) -> None:
    """Run API + brains (+ local hands) until cancelled."""
    import uvicorn

    from corral.api.app import create_asgi
    from corral.runtime import open_runtime

    async with traced(settings), open_runtime(settings) as runtime:
        config = uvicorn.Config(
            create_asgi(runtime),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            log_config=None,  # uvicorn's loggers go through ours (JSON lines off a terminal)
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        server = uvicorn.Server(config)
        tune_gc()
        if ready is not None:
            ready(server)
        await server.serve()


def tune_gc() -> None:
    """Keep full collections rare and cheap: with thousands of streams and sessions in
    flight, default thresholds stall the event loop for hundreds of milliseconds."""
    gc.collect()
    gc.freeze()  # everything alive after start-up is permanent: never scan it again
    gc.set_threshold(20_000, 20, 50)
