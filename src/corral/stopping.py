"""A process's graceful stop (docs/deploy.md, "Stopping and restarting").

The first SIGTERM or SIGINT requests it: the scheduler claims nothing new, each brain finishes
its current step (a running tool call completes and its result is logged) and then releases
its lease so another process takes the session at once, and SSE streams end their bodies
cleanly (the client reconnects; every event is in the log). All of it within
`shutdown_grace_seconds`; a second signal, or the grace running out, kills the process by that
signal, as if no handler were installed.

A leaf module: the brain, the API and the command line all read the same `Stopping`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable

import anyio

from corral.observability.logs import fields

log = logging.getLogger("corral.stopping")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopping:
    """Whether (and since when) this process was asked to stop."""

    def __init__(self, grace_seconds: float = 20.0) -> None:
        self.grace_seconds = grace_seconds
        self._deadline: float | None = None
        self._event: anyio.Event | None = None
        """Made on first wait: an anyio Event needs a running event loop."""
        self._callbacks: list[Callable[[], None]] = []

    @property
    def requested(self) -> bool:
        """True once the stop was requested."""
        return self._deadline is not None

    def request(self) -> None:
        """Start the stop (idempotent: the grace counts from the first request)."""
        if self._deadline is not None:
            return
        self._deadline = time.monotonic() + self.grace_seconds
        if self._event is not None:
            self._event.set()
        for callback in self._callbacks:
            callback()

    def on_request(self, callback: Callable[[], None]) -> None:
        """Call `callback` (in the event loop's thread) when the stop is requested; a
        callback costs nothing per waiter, where a task waiting would (SSE streams)."""
        self._callbacks.append(callback)

    def remaining(self) -> float:
        """Seconds of grace left (the whole grace before any request)."""
        if self._deadline is None:
            return self.grace_seconds
        return max(0.0, self._deadline - time.monotonic())

    async def wait(self) -> None:
        """Return once the stop is requested."""
        if self._event is None:
            self._event = anyio.Event()
        if self.requested:
            return
        await self._event.wait()


async def watch_signals(stopping: Stopping, on_request: Callable[[], None] | None = None) -> None:
    """Until cancelled: the first SIGTERM/SIGINT requests `stopping` (and calls `on_request`);
    a second one, or the grace running out, kills the process by the signal.

    Only the main thread can receive signals; elsewhere (an embedded server in a thread)
    this returns at once and the process's own handling applies."""
    if threading.current_thread() is not threading.main_thread():
        return
    with anyio.open_signal_receiver(*SIGNALS) as signals:
        async with anyio.create_task_group() as tg:
            async for sig in signals:
                name = signal.Signals(sig).name
                if stopping.requested:
                    log.warning("second %s: stopping at once", name)
                    kill(sig)
                log.info(
                    "%s: stopping: claiming no new work, finishing current steps and handing "
                    "sessions over (up to %g s; send it again to stop at once)",
                    name,
                    stopping.grace_seconds,
                    extra=fields(kind="stop"),
                )
                stopping.request()
                if on_request is not None:
                    on_request()
                tg.start_soon(_kill_when_grace_ends, stopping, sig)


async def _kill_when_grace_ends(stopping: Stopping, sig: int) -> None:
    await anyio.sleep(stopping.remaining())
    log.warning(
        "shutdown grace of %g s ran out: stopping at once (sessions still leased are taken "
        "over when their lease expires)",
        stopping.grace_seconds,
    )
    kill(sig)


def kill(sig: int) -> None:
    """End the process by `sig` with its default action (what happens with no handler)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
