"""Lazily provisioned sandboxes per session: the brain's only door to the hands.

A sandbox appears on the first tool call that needs one, is reused across turns, is reaped
after an idle time, and is re-made from the same recipe after it dies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from corral.errors import HandsError
from corral.hands.base import Hands, Sandbox, SandboxRecipe, ToolOutput

log = logging.getLogger("corral.hands")
RecipeFactory = Callable[[str], Awaitable[SandboxRecipe]]


@dataclass(slots=True)
class _Slot:
    sandbox: Sandbox
    last_used: float = field(default_factory=time.monotonic)


class SandboxPool:
    """Session id -> live sandbox, provisioned on demand."""

    def __init__(
        self,
        hands: Hands,
        recipe_for: RecipeFactory,
        *,
        idle_seconds: float,
        after_execute: Callable[[SandboxRecipe], Awaitable[object]] | None = None,
    ) -> None:
        self._hands = hands
        self._after_execute = after_execute
        self._recipes: dict[str, SandboxRecipe] = {}
        self._recipe_for = recipe_for
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
                    await self._after_execute(self._recipes[session_id])
                return output
            except HandsError as exc:
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
        slot = self._slots.get(session_id)
        if slot is not None and slot.sandbox.alive:
            return slot
        if slot is not None:
            await self.discard(session_id)
        recipe = await self._recipe_for(session_id)
        sandbox = await self._hands.provision(recipe)
        self._recipes[session_id] = recipe
        self.provisioned += 1
        slot = self._slots[session_id] = _Slot(sandbox=sandbox)
        return slot

    async def ensure(self, session_id: str) -> None:
        """Provision now if absent (the coupled, eager design; benchmarks compare against it)."""
        lock = self._locks.setdefault(session_id, anyio.Lock())
        async with lock:
            await self._slot(session_id)

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

    def has_sandbox(self, session_id: str) -> bool:
        """Whether a sandbox currently exists for the session."""
        return session_id in self._slots

    async def discard(self, session_id: str) -> None:
        """Destroy the session's sandbox (archive, delete, death); files stay."""
        slot = self._slots.pop(session_id, None)
        if slot is not None:
            with anyio.CancelScope(shield=True):
                await slot.sandbox.destroy()

    async def reap_idle(self) -> None:
        """Destroy sandboxes unused for longer than the idle time."""
        cutoff = time.monotonic() - self._idle_seconds
        for session_id, slot in list(self._slots.items()):
            lock = self._locks.get(session_id)
            if slot.last_used < cutoff and not (lock and lock.locked()):
                await self.discard(session_id)

    async def aclose(self) -> None:
        """Destroy every sandbox."""
        for session_id in list(self._slots):
            await self.discard(session_id)
        await self._hands.aclose()
