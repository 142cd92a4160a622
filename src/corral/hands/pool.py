"""Lazily provisioned sandboxes per session: the brain's only door to the hands.

A sandbox appears on the first tool call that needs one, is reused across turns, is reaped
after an idle time, and is re-made from the same recipe after it dies. It follows its
session row, wherever the row was changed: a call first compares the row's recipe
generation with the sandbox's (a change re-makes it, workspace kept), and `tick` checks
every live sandbox's session in one batch (archived, deleted or changed ones are destroyed,
deleted ones' files purged). Only the process that runs brains holds sandboxes; the API
never touches them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from corral.errors import HandsError
from corral.hands.base import Hands, Sandbox, SandboxRecipe, ToolOutput
from corral.hands.repositories import RepositoryFailure
from corral.observability.metrics import (
    SANDBOX_DEATHS,
    SANDBOX_PROVISION_LATENCY,
    SANDBOX_PROVISIONS,
)
from corral.observability.tracing import span

log = logging.getLogger("corral.hands")
SANDBOX_DEATH_CODES = frozenset({"sandbox_died", "sandbox_unresponsive", "sandbox_protocol"})
"""Hands error codes that mean the sandbox itself failed under a call (a death)."""
RecipeFactory = Callable[[str], Awaitable[SandboxRecipe]]
Prepare = Callable[[SandboxRecipe], Awaitable[Sequence[RepositoryFailure]]]
"""Host-side work before a sandbox is made from a recipe (cloning its repositories); what
failed is reported as `session.error`s and the sandbox is made without it."""
Standings = Callable[[Sequence[str]], Awaitable[Mapping[str, str | None]]]
"""Session ids -> the recipe generation of each existing session (a digest of what its
recipe is made from), or None when it may hold no sandbox (archived, terminated). A deleted
session is missing from the answer."""


class Hold(Protocol):
    """A session's directory marked as used by a live sandbox (see `hands.workspaces`)."""

    def release(self) -> None:
        """Unmark; called once the sandbox is destroyed."""
        ...


@dataclass(slots=True)
class _Slot:
    sandbox: Sandbox
    generation: str
    hold: Hold
    last_used: float = field(default_factory=time.monotonic)


class SandboxPool:
    """Session id -> live sandbox, provisioned on demand.

    `standings` says what each session's sandbox must be now; `hold` marks a session's
    directory used while its sandbox lives; `purge` removes a deleted session's files once
    no sandbox uses them (False when one still does somewhere).
    """

    def __init__(
        self,
        hands: Hands,
        recipe_for: RecipeFactory,
        *,
        standings: Standings,
        hold: Callable[[str], Awaitable[Hold]],
        purge: Callable[[str], Awaitable[bool]],
        idle_seconds: float,
        after_execute: Callable[[SandboxRecipe], Awaitable[object]] | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        self._hands = hands
        self._prepare = prepare
        self._notices: dict[str, list[RepositoryFailure]] = {}
        self._after_execute = after_execute
        self._recipes: dict[str, SandboxRecipe] = {}
        self._recipe_for = recipe_for
        self._standings = standings
        self._hold = hold
        self._purge = purge
        self._idle_seconds = idle_seconds
        self._slots: dict[str, _Slot] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self.provisioned = 0
        """How many sandboxes were made (tests and status use it)."""

    async def execute(self, session_id: str, name: str, tool_input: dict[str, Any]) -> ToolOutput:
        """Run a built-in tool in the session's sandbox; sandbox failure becomes a tool error."""
        lock = self._locks.setdefault(session_id, anyio.Lock())
        async with lock:
            try:
                slot = await self._slot(session_id)
                slot.last_used = time.monotonic()
                output = await slot.sandbox.execute(name, tool_input)
                if self._after_execute is not None:
                    notes = await self._after_execute(self._recipes[session_id])
                    if isinstance(notes, list) and notes:  # outputs refused: tell the model
                        text = "\n".join(str(note) for note in notes)
                        block = {"type": "text", "text": text}
                        output = ToolOutput(content=[*output.content, block], is_error=True)
                return output
            except HandsError as exc:
                if exc.code in SANDBOX_DEATH_CODES:
                    SANDBOX_DEATHS.labels(exc.code).inc()
                await self.discard(session_id)
                hint = " The next call will run in a fresh sandbox." if exc.retryable else ""
                return ToolOutput.text(
                    f"Sandbox error ({exc.code}): {exc.message}.{hint}", is_error=True
                )
            except Exception as exc:  # an unexpected hands failure is still only a tool error
                log.exception("sandbox failure in %s", session_id)
                await self.discard(session_id)
                return ToolOutput.text(
                    f"Sandbox error: {exc!r}. The next call will run in a fresh sandbox.",
                    is_error=True,
                )

    async def _slot(self, session_id: str) -> _Slot:
        generation = await self._generation(session_id)
        slot = self._slots.get(session_id)
        if slot is not None and slot.sandbox.alive and slot.generation == generation:
            return slot
        if slot is not None:  # dead, or made from what the session was before: re-make it
            if not slot.sandbox.alive:
                SANDBOX_DEATHS.labels("found_dead").inc()
            await self._drop(session_id)
        hold = await self._hold(session_id)
        started = time.perf_counter()
        try:
            with span("corral.sandbox_provision", session_id):
                recipe = await self._recipe_for(session_id)
                if self._prepare is not None and recipe.repositories:
                    failures = await self._prepare(recipe)
                    self._notices.setdefault(session_id, []).extend(failures)
                sandbox = await self._hands.provision(recipe)
        except BaseException:
            SANDBOX_PROVISIONS.labels("error").inc()
            hold.release()
            raise
        SANDBOX_PROVISIONS.labels("ok").inc()
        SANDBOX_PROVISION_LATENCY.observe(time.perf_counter() - started)
        self._recipes[session_id] = recipe
        self.provisioned += 1
        slot = _Slot(sandbox=sandbox, generation=generation, hold=hold)
        self._slots[session_id] = slot
        return slot

    async def _generation(self, session_id: str) -> str:
        """What the session's sandbox must be made from now (read before the recipe, so a
        change racing with provisioning only causes one more re-make, never a stale one).

        Raises:
            HandsError: `session_deleted` or `session_archived`: no sandbox may run for it.
        """
        standing = await self._standings([session_id])
        if session_id not in standing:
            msg = f"session {session_id} was deleted"
            raise HandsError("session_deleted", msg, retryable=False)
        generation = standing[session_id]
        if generation is None:
            msg = f"session {session_id} is archived and runs no more tools"
            raise HandsError("session_archived", msg, retryable=False)
        return generation

    async def ensure(self, session_id: str) -> None:
        """Provision now if absent (the coupled, eager design; benchmarks compare against it)."""
        lock = self._locks.setdefault(session_id, anyio.Lock())
        async with lock:
            await self._slot(session_id)

    def take_notices(self, session_id: str) -> list[RepositoryFailure]:
        """What went wrong preparing the session's sandbox since the last call (the brain
        logs them as `session.error`s; the tool call itself ran)."""
        return self._notices.pop(session_id, [])

    def describe(self) -> list[dict[str, Any]]:
        """Live sandboxes for operators: session, host pid of the sandbox's init, idle time."""
        now = time.monotonic()
        return [
            {
                "session_id": session_id,
                "pid": getattr(slot.sandbox, "init_pid", None),
                "idle_seconds": round(now - slot.last_used, 1),
            }
            for session_id, slot in self._slots.items()
        ]

    @property
    def live(self) -> int:
        """How many sandboxes exist now."""
        return len(self._slots)

    async def discard(self, session_id: str) -> None:
        """Destroy the session's sandbox (death, failure, idleness); files stay unless the
        session was deleted meanwhile, then they are purged (nobody else may be able to)."""
        await self._drop(session_id)
        try:
            if session_id not in await self._standings([session_id]):
                await self._forget(session_id)
        except Exception:  # the next tick retries whatever this could not check
            log.exception("checking %s after discarding its sandbox", session_id)

    async def _drop(self, session_id: str) -> None:
        """Destroy the sandbox, then unmark its directory (only then may it be purged)."""
        slot = self._slots.pop(session_id, None)
        if slot is not None:
            with anyio.CancelScope(shield=True):
                try:
                    await slot.sandbox.destroy()
                finally:
                    slot.hold.release()

    async def _forget(self, session_id: str) -> None:
        """A deleted session: purge its files, drop what the pool kept for it."""
        if not self._busy(session_id):
            self._recipes.pop(session_id, None)
            self._locks.pop(session_id, None)
        await self._purge(session_id)

    async def tick(self) -> None:
        """Bring live sandboxes in step with their sessions, then reap idle ones.

        The process running brains calls this every few seconds: the API changes rows, never
        sandboxes, so this is how an archive, a delete or a resource change made through any
        API process reaches a sandbox held here.
        """
        slots = dict(self._slots)
        standing = await self._standings(list(slots)) if slots else {}
        for session_id, slot in slots.items():
            if self._slots.get(session_id) is not slot:
                continue  # replaced or dropped meanwhile
            if session_id not in standing:  # deleted: stop it even mid-call, then purge
                await self._drop(session_id)
                await self._forget(session_id)
            elif standing[session_id] is None:  # archived: it runs nothing more
                await self._drop(session_id)
            elif standing[session_id] != slot.generation and not self._busy(session_id):
                await self._drop(session_id)  # a call in flight re-makes it at the next one
        await self.reap_idle()

    def _busy(self, session_id: str) -> bool:
        lock = self._locks.get(session_id)
        return lock is not None and lock.locked()

    async def reap_idle(self) -> None:
        """Destroy sandboxes unused for longer than the idle time."""
        cutoff = time.monotonic() - self._idle_seconds
        for session_id, slot in list(self._slots.items()):
            if slot.last_used < cutoff and not self._busy(session_id):
                await self.discard(session_id)

    async def aclose(self) -> None:
        """Destroy every sandbox."""
        for session_id in list(self._slots):
            await self._drop(session_id)
        await self._hands.aclose()
