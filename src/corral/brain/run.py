"""One claimed run of one session: the fenced append, the cached log, interrupt watching."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio

from corral.brain.sandboxes import SandboxPool
from corral.brain.state import SessionState, fold
from corral.models.base import ModelClient
from corral.session.log import EventQuery, Fence, NewEvents, StoredEvent, Subscription
from corral.store.base import SessionRow, Store

T = TypeVar("T")
_WATCH_SECONDS = 5.0


class ModelDirectory(Protocol):
    """Finds the client for an agent's model name."""

    def client_for(self, model: str) -> ModelClient:
        """The provider for `model`; raises ValueError when none matches."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BrainSettings:
    """Tunables of the harness."""

    lease_seconds: float = 10.0
    max_model_retries: int = 4
    retry_base_seconds: float = 0.5
    retry_max_seconds: float = 8.0
    max_steps_per_run: int = 500
    eager_sandboxes: bool = False
    """Provision the sandbox before the first model call (only to measure the coupled design)."""


class SkillCatalog(Protocol):
    """Names and descriptions of pinned skill versions, for the system prompt."""

    async def describe(self, skill_id: str, version_id: str) -> tuple[str, str]:
        """(name, description) of a skill version; raises NotFound if it is gone."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BrainDeps:
    """What a brain is given; nothing here holds session state."""

    store: Store
    models: ModelDirectory
    sandboxes: SandboxPool | None
    settings: BrainSettings
    skills: SkillCatalog | None = None


class Run:
    """The brain's view of a session during one lease."""

    def __init__(self, deps: BrainDeps, fence: Fence, session: SessionRow) -> None:
        self.deps = deps
        self.fence = fence
        self.session = session
        self.events: list[StoredEvent] = []

    @property
    def agent(self) -> dict[str, Any]:
        """The agent snapshot pinned at session creation (plus session updates)."""
        return dict(self.session.body["agent"])

    async def refresh(self) -> SessionState:
        """Read events appended since the last read and fold the whole log."""
        after = self.events[-1].seq if self.events else None
        self.events.extend(
            await self.deps.store.read(self.fence.session_id, EventQuery(after_seq=after))
        )
        return fold((e.seq, e.body) for e in self.events)

    def bodies(self) -> list[dict[str, Any]]:
        """Wire bodies of the cached log."""
        return [e.body for e in self.events]

    async def append(self, *bodies: dict[str, Any]) -> None:
        """Append under our fence (raises LeaseLost when another brain took over)."""
        with anyio.CancelScope(shield=True):
            stored = await self.deps.store.append(
                self.fence.session_id, list(bodies), fence=self.fence
            )
        last = self.events[-1].seq if self.events else 0
        if stored and stored[0].seq == last + 1:
            self.events.extend(stored)
        else:
            await self.refresh()  # others appended in between: read the gap in order

    async def _interrupt_signalled(self, sub: Subscription, start: int) -> bool:
        """Wait for the next signals; True if they (or, when unsure, the log) hold an interrupt.

        Previews are ignored and events carried by a local signal are inspected in place, so
        a streaming model response costs no reads; a bare signal (another process appended)
        or a quiet spell triggers one filtered read.
        """
        signals = await sub.next(_WATCH_SECONDS)
        new = [s for s in signals if isinstance(s, NewEvents)]
        if signals and not new:
            return False
        if new and all(s.events for s in new):
            return any(e.type == "user.interrupt" for s in new for e in s.events)
        return await self._interrupt_in_log(start)

    async def _interrupt_in_log(self, start: int) -> bool:
        found = await self.deps.store.read(
            self.fence.session_id, EventQuery(after_seq=start, types=["user.interrupt"])
        )
        return bool(found)

    async def interruptible(self, work: Callable[[], Awaitable[T]]) -> tuple[T | None, bool]:
        """Run `work`, cancelling it if a `user.interrupt` is appended meanwhile."""
        result: list[T] = []
        interrupted = False
        sub = self.deps.store.subscribe(self.fence.session_id)
        start = self.events[-1].seq if self.events else 0

        async def watch(scope: anyio.CancelScope) -> None:
            nonlocal interrupted
            # An interrupt appended before we subscribed sent its signal to nobody: look once.
            if await self._interrupt_in_log(start):
                interrupted = True
                scope.cancel()
                return
            while True:
                if await self._interrupt_signalled(sub, start):
                    interrupted = True
                    scope.cancel()
                    return

        failures: list[Exception] = []

        async def body(scope: anyio.CancelScope) -> None:
            try:
                result.append(await work())
            except Exception as exc:  # re-raised below, outside the task group
                failures.append(exc)
            scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch, tg.cancel_scope)
                tg.start_soon(body, tg.cancel_scope)
        finally:
            sub.close()
        if failures:
            raise failures[0]
        return (result[0] if result else None), interrupted
