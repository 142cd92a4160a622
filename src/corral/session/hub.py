"""In-process fan-out of log signals to followers (SSE streams, waiting brains).

Backends publish here after commit; a cross-process backend feeds it from its own
notifications. Signals only say "look again": the log stays the source of truth.
"""

from __future__ import annotations

from collections import defaultdict

import anyio

from corral.session.log import Signal


class HubSubscription:
    """One follower's mailbox."""

    def __init__(self, hub: Hub, session_id: str) -> None:
        self._hub = hub
        self.session_id = session_id
        self._pending: list[Signal] = []
        self._ready = anyio.Event()
        self._closed = False

    def push(self, signal: Signal) -> None:
        """Called by the hub on the event loop."""
        self._pending.append(signal)
        self._ready.set()

    async def next(self, timeout: float) -> list[Signal]:
        """Signals since the last call; `[]` after `timeout` seconds of silence."""
        if not self._pending:
            with anyio.move_on_after(timeout):
                await self._ready.wait()
        return self.drain()

    def drain(self) -> list[Signal]:
        """Signals since the last call, without waiting."""
        signals, self._pending = self._pending, []
        if signals:
            self._ready = anyio.Event()
        return signals

    def close(self) -> None:
        """Stop following; idempotent."""
        if not self._closed:
            self._closed = True
            self._hub.discard(self)


class Hub:
    """Session id -> live subscriptions."""

    def __init__(self) -> None:
        self._subs: defaultdict[str, set[HubSubscription]] = defaultdict(set)

    def subscribe(self, session_id: str) -> HubSubscription:
        """A new mailbox for `session_id`."""
        sub = HubSubscription(self, session_id)
        self._subs[session_id].add(sub)
        return sub

    def discard(self, sub: HubSubscription) -> None:
        """Forget a mailbox."""
        subs = self._subs.get(sub.session_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.session_id]

    def publish(self, session_id: str, signal: Signal) -> None:
        """Deliver `signal` to every follower of `session_id`."""
        for sub in list(self._subs.get(session_id, ())):
            sub.push(signal)

    def session_ids(self) -> list[str]:
        """Sessions with at least one follower (a backend resyncs them after a lost signal)."""
        return list(self._subs)
