"""One claimed run of one session: the fenced append, the incrementally folded state and
transcript, and the interrupt watch.

The watch is mechanism only: it cancels a running tool or model call when a `user.interrupt`
is logged; what happens next is `decide`'s call. Nothing here decides policy.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import anyio
import anyio.lowlevel

from corral.brain import events as ev
from corral.brain.context import Transcript, system_prompt, tool_definitions
from corral.brain.mcp import McpToolsets
from corral.brain.memo import Folded, Memo
from corral.brain.outage import LostWrites
from corral.brain.state import SessionState, apply
from corral.brain.telemetry import RunTelemetry
from corral.brain.threads import transcript_view
from corral.brain.tool_provider import ToolProvider
from corral.brain.window import estimate_tokens, result_cap
from corral.context_window import ContextPolicy
from corral.hands.pool import SandboxPool
from corral.models.base import ModelClient
from corral.pricing import Price
from corral.session.log import (
    EventQuery,
    Fence,
    NewEvents,
    Preview,
    Signal,
    StoredEvent,
    Subscription,
)
from corral.stopping import Stopping
from corral.store.base import SessionRow, Store
from corral.store.work_base import WorkItems
from corral.tools.web_search import WebSearch
from corral.wire.events import parse_event

T = TypeVar("T")
_WATCH_SECONDS = 5.0
_PAGE = 1000
"""Events per read when catching up: a cold fold of a long log yields to the event loop."""


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
    """The longest backoff between two attempts when the provider names no wait."""
    model_retry_max_seconds: float = 120.0
    """How long a turn retries a failing model call, from its first failure in a row."""
    max_steps_per_turn: int = 500
    """Steps (one tool or model call each) before a turn is stopped as runaway."""
    work_ttl_seconds: int = 90
    """Lease of the work items queued for self-hosted sessions."""
    eager_sandboxes: bool = False
    """Provision the sandbox before the first model call (only to measure the coupled design)."""


class PriceList(Protocol):
    """List prices of models (`ModelRouter.price_for`)."""

    def price_for(self, model: str) -> Price | None:
        """The price of `model`, or None when it has none (its cost is not tracked)."""
        ...


class ContextPolicies(Protocol):
    """Context windows of models (`ModelRouter.context_for`)."""

    def context_for(self, model: str) -> ContextPolicy | None:
        """How `model`'s context is managed, or None when it is never compacted."""
        ...


class SkillCatalog(Protocol):
    """Names and descriptions of pinned skill versions, for the system prompt."""

    async def describe(self, skill_id: str, version_id: str) -> tuple[str, str]:
        """(name, description) of a skill version; raises NotFound if it is gone."""
        ...


@dataclass(slots=True)
class BrainStats:
    """Work counters of this process's brains (admin status shows them; tests count with
    them that a step's work grows with the new events, not with the log)."""

    steps: int = 0
    events_applied: int = 0
    """Events folded into a state (and transcript)."""
    blocks_built: int = 0
    """Content blocks made for the model's messages."""
    cold_folds: int = 0
    """Runs that had to fold a log from its start (no memo of the session)."""

    def snapshot(self) -> dict[str, int]:
        """The counters as a JSON-ready mapping."""
        return {
            "steps": self.steps,
            "events_applied": self.events_applied,
            "blocks_built": self.blocks_built,
            "cold_folds": self.cold_folds,
        }


CredentialCheck = Callable[[SessionRow], Awaitable[list[dict[str, Any]]]]
"""A session -> `credential_host_unreachable_error` bodies (type, message, credential_id,
vault_id) for its credentials whose hosts its environment's networking blocks."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrainDeps:
    """What a brain is given; nothing here holds session state but the memo (a cache)."""

    store: Store
    models: ModelDirectory
    sandboxes: SandboxPool | None
    settings: BrainSettings
    skills: SkillCatalog | None = None
    credential_check: CredentialCheck | None = None
    """Run when a turn starts (None: credentials are not checked)."""
    mcp: McpToolsets | None = None
    """MCP tool discovery and calls (None: agents' MCP servers get error results)."""
    web_search: WebSearch | None = None
    """The operator's search provider (None: `web_search` calls get an error result)."""
    work: WorkItems | None = None
    """The self-hosted work queue (None: no session can have remote hands)."""
    prices: PriceList | None = None
    """List prices (None: no cost is tracked, so budgets only ever see zero)."""
    contexts: ContextPolicies | None = None
    """Context windows (None: no session is ever compacted)."""
    tools: tuple[ToolProvider[Run], ...] = ()
    """Tool families beyond the built-in ones (`brain/actions.py` lists those); a family
    listed here is looked up first, so it may also take over a built-in name."""
    memo: Memo = field(default_factory=Memo)
    lost_writes: LostWrites = field(default_factory=LostWrites)
    """Sessions whose turn a storage failure stopped, to report when the store writes again."""
    stopping: Stopping = field(default_factory=Stopping)
    """This process's stop: once requested, brains hand their sessions over after the
    current step."""
    stats: BrainStats = field(default_factory=BrainStats)


class Run:
    """The brain's view of a session during one lease."""

    def __init__(
        self, deps: BrainDeps, fence: Fence, session: SessionRow, folded: Folded | None = None
    ) -> None:
        self.deps = deps
        self.fence = fence
        self.session = session
        if folded is None:
            deps.stats.cold_folds += 1
            folded = Folded(state=SessionState(), transcript=Transcript())
        self.state = folded.state
        self.transcript = folded.transcript
        model = (self.agent.get("model") or {}).get("id")
        self.telemetry = RunTelemetry(fence.session_id, str(model or "unknown"))
        self.context_policy = self._configure_context()
        self._follow = deps.store.subscribe(fence.session_id)
        """Opened before the first read: from then on it hears of every append to the log
        made in this process (with its events) or elsewhere (a bare signal)."""
        self._heard: list[Signal] = []
        """Signals taken from `_follow` and not yet applied."""
        self._read = False
        self.retry_delay: float | None = None
        """The wait before the next model call, planned when the last one failed
        (`brain.retry`); None: none planned by this run."""

    @property
    def agent(self) -> dict[str, Any]:
        """The agent snapshot pinned at session creation (plus session updates)."""
        return dict(self.session.body["agent"])

    @property
    def sandbox_id(self) -> str:
        """Whose sandbox this run's tools use: a child thread shares its session's."""
        return self.session.parent_id or self.fence.session_id

    def price(self) -> Price | None:
        """The list price of this session's model, if it has one."""
        prices = self.deps.prices
        return None if prices is None else prices.price_for(str(self.agent["model"]["id"]))

    def _configure_context(self) -> ContextPolicy | None:
        """Give the meter and the transcript this session's window (configuration, not log:
        set before anything is folded, and the same after a restart)."""
        contexts, agent = self.deps.contexts, self.agent
        policy = None if contexts is None else contexts.context_for(str(agent["model"]["id"]))
        meter = self.state.context
        if policy is None:
            meter.limit = meter.cap = self.transcript.result_cap = None
            return None
        meter.limit = policy.limit
        meter.cap = self.transcript.result_cap = result_cap(policy.window)
        meter.overhead = estimate_tokens([system_prompt(agent, ()), tool_definitions(agent)])
        return policy

    def folded(self) -> Folded:
        """What this run has folded so far (for the memo)."""
        return Folded(state=self.state, transcript=self.transcript)

    def close(self) -> None:
        """The run is over: stop following the log."""
        self._follow.close()

    async def refresh(self) -> SessionState:
        """Apply the events appended since the last read; the whole log on a cold start.

        After the first read, the run's subscription says what was appended since: when
        every signal carries its events and they continue the state (the common case: our
        own appends, a client's in this process), they are applied without a read. A bare
        signal (another process appended), a gap or a deleted session costs a read.
        """
        heard = self._hear()
        self._heard = []
        if self._read and (new := _carried(heard, self.state.last_seq)) is not None:
            self._apply(new)
            return self.state
        self._read = True
        while True:
            page = await self.deps.store.read(
                self.fence.session_id,
                EventQuery(after_seq=self.state.last_seq, limit=_PAGE, internal=True),
            )
            self._apply(page)
            if len(page) < _PAGE:
                return self.state
            await anyio.lowlevel.checkpoint()

    async def append(self, *bodies: dict[str, Any]) -> list[StoredEvent]:
        """Append under our fence (raises LeaseLost when another brain took over) and apply.

        The first append of a brain that marks tool starts also logs `corral.log_format`.
        """
        if self.state.format_seq == 0:
            bodies = (ev.log_format(), *bodies)
        last = self.state.last_seq
        started = time.perf_counter()
        with anyio.CancelScope(shield=True):
            stored = await self.deps.store.append(
                self.fence.session_id, list(bodies), fence=self.fence
            )
        seconds = time.perf_counter() - started
        if stored and stored[0].seq != last + 1:
            # Others appended in between: apply exactly that gap first, so the state (and a
            # request built from it) is the log up to our events and nothing after them.
            gap = await self.deps.store.read(
                self.fence.session_id,
                EventQuery(after_seq=last, before_seq=stored[0].seq, internal=True),
            )
            self._apply(gap)
        self._apply(stored)
        closed = self.telemetry.appended(self.state, stored, seconds)
        if closed is not None:
            self.telemetry.turn_closed(self.state, closed)
        return stored

    def _hear(self) -> list[Signal]:
        self._heard.extend(self._follow.drain())
        return self._heard

    def messages(self) -> list[dict[str, Any]]:
        """The model's messages for the log as applied so far."""
        before = self.transcript.blocks_built
        out = self.transcript.messages()
        self.deps.stats.blocks_built += self.transcript.blocks_built - before
        return out

    def _apply(self, events: Iterable[StoredEvent]) -> None:
        before = self.transcript.blocks_built
        count = 0
        for stored in events:
            event = parse_event(stored.body)
            apply(self.state, stored.seq, event)
            shown = transcript_view(event)
            if shown is not None:
                self.transcript.apply(shown)
            count += 1
        self.deps.stats.events_applied += count
        self.deps.stats.blocks_built += self.transcript.blocks_built - before

    async def until_interrupt(
        self, work: Callable[[], Awaitable[T]], *, after: int
    ) -> tuple[T | None, bool]:
        """Run `work`, cancelling it if a `user.interrupt` is logged after seq `after` (the
        position `decide` saw). Returns (its result, or None if it was cancelled; whether an
        interrupt came)."""
        if self.state.interrupt_seq > after:
            return None, True
        result: list[T] = []
        interrupted = False
        failures: list[Exception] = []
        sub = self.deps.store.subscribe(self.fence.session_id)

        async def watch(scope: anyio.CancelScope) -> None:
            nonlocal interrupted
            # An interrupt appended before we subscribed signalled only the run's follower.
            if not await self._interrupt_heard(after):
                while not await self._interrupt_signalled(sub, after):
                    pass
            interrupted = True
            scope.cancel()

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

    async def _interrupt_signalled(self, sub: Subscription, after: int) -> bool:
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
            return any(e.type == "user.interrupt" and e.seq > after for s in new for e in s.events)
        return await self._interrupt_in_log(after)

    async def _interrupt_heard(self, after: int) -> bool:
        """Whether the signals heard since the last refresh (or, when they do not carry
        their events, the log) hold an interrupt after seq `after`."""
        new = _carried(self._hear(), after)
        if new is None:
            return await self._interrupt_in_log(after)
        return any(e.type == "user.interrupt" for e in new)

    async def _interrupt_in_log(self, after: int) -> bool:
        found = await self.deps.store.read(
            self.fence.session_id, EventQuery(after_seq=after, types=["user.interrupt"])
        )
        return bool(found)


def _carried(signals: list[Signal], after: int) -> list[StoredEvent] | None:
    """The events after seq `after` that `signals` carry, when that is all of them: the
    local appends' signals continue `after` without a gap, and any bare signal (another
    process's append, or PostgreSQL's echo of ours) names no seq past them. None when a read
    is needed."""
    new: list[StoredEvent] = []
    named = after
    for signal in signals:
        if isinstance(signal, NewEvents):
            new.extend(e for e in signal.events if e.seq > after)
            named = max(named, signal.last_seq)
        elif not isinstance(signal, Preview):
            return None  # the session is gone: let the read say what is left
    if any(e.seq != after + i for i, e in enumerate(new, 1)):
        return None
    return new if named <= after + len(new) else None
