"""The scheduler's wake-up flag, shared by both stores."""

from __future__ import annotations

import anyio


class WorkSignal:
    """Work became due in this process (an append that woke a session, a release with work
    pending, a NOTIFY from another process).

    A signal stays noted until the next claim begins, so one that arrives while a claim runs
    or before anyone waits is never lost, and a scheduler that claimed fewer sessions than it
    had room for waits instead of claiming again only to find nothing.
    """

    def __init__(self) -> None:
        self._ready = anyio.Event()

    def signal(self) -> None:
        """Note that work is due (from the event loop's thread)."""
        self._ready.set()

    def claiming(self) -> None:
        """A claim begins: it sees every signal so far, so later waits wait for newer ones."""
        if self._ready.is_set():
            self._ready = anyio.Event()

    async def wait(self, timeout: float) -> None:
        """Return at a signal not yet seen by a claim, or after `timeout` seconds."""
        with anyio.move_on_after(timeout):
            await self._ready.wait()
