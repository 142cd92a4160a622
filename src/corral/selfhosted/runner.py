"""Serving one session's built-in tool calls, with the SDK session tool runner's semantics.

On every (re)connection the stream is opened first, then the whole history is read, so an
event emitted between the two is not lost; events are deduplicated by id. A call is run
once it is unanswered and allowed: `evaluated_permission` `allow`, or `ask` followed by a
`user.tool_confirmation` `allow` (a `deny` is never run; the server answers it). Its result
goes back as `user.tool_result`. The runner returns when the session terminates or is
deleted, or once the session has been idle (any stop reason but `requires_action`) for
`max_idle` seconds with nothing to run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anthropic
import anyio

from corral.hands.base import ToolOutput
from corral.tools.builtin import SANDBOX_TOOLS

log = logging.getLogger("corral.selfhosted")

Execute = Callable[[str, dict[str, Any]], Awaitable[ToolOutput]]
"""(tool name, input) -> output, run in the session's sandbox."""
_NEUTRAL = frozenset({"user.tool_confirmation", "session.thread_status_terminated"})
"""Events that neither start nor end a turn (they do not reset the idle clock)."""
_END = frozenset({"session.status_terminated", "session.deleted"})
_BACKOFF_START, _BACKOFF_MAX = 0.5, 10.0


def ends_turn(event: Any) -> bool:
    """An idle that waits on nobody's tool, or a terminated session."""
    if event.type == "session.status_idle":
        return bool(event.stop_reason is None or event.stop_reason.type != "requires_action")
    return bool(event.type in _END)


class SessionRunner:
    """Runs the calls of `session_id` through `execute`, posting results with `client`
    (authenticated with the item's sessions token)."""

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        session_id: str,
        execute: Execute,
        *,
        max_idle: float,
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.execute = execute
        self.max_idle = max_idle
        self.executed = 0
        """Calls run so far (for logs and tests)."""
        self._seen: set[str] = set()
        self._answered: set[str] = set()
        self._verdicts: dict[str, str] = {}
        self._held: dict[str, Any] = {}
        self._busy = False
        self._idle_since: float | None = None
        self._done = anyio.Event()
        self._send, self._receive = anyio.create_memory_object_stream[Any](max_buffer_size=1000)

    async def run(self) -> None:
        """Serve until the session ends or stays idle for `max_idle` seconds."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._stream_loop)
            tg.start_soon(self._dispatch_loop)
            tg.start_soon(self._idle_watch)
            await self._done.wait()
            tg.cancel_scope.cancel()

    # ---- events ------------------------------------------------------------------------

    async def _stream_loop(self) -> None:
        backoff = _BACKOFF_START
        events = self.client.beta.sessions.events
        while not self._done.is_set():
            try:
                async with await events.stream(self.session_id) as stream:
                    await self._reconcile()
                    async for event in stream:
                        backoff = _BACKOFF_START
                        await self._note(event)
                        if self._done.is_set():
                            return
            except anthropic.APIStatusError as exc:
                if exc.status_code in (401, 403, 404):  # token dead or session gone
                    log.warning("session %s: stream refused (%s)", self.session_id, exc.status_code)
                    self._done.set()
                    return
                log.warning("session %s: stream failed (%s)", self.session_id, exc)
            except Exception as exc:  # the server went away mid-stream (its transport's own
                # errors are not the SDK's), a bad frame…: reconnect and read the log again
                log.warning("session %s: stream dropped (%r)", self.session_id, exc)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)

    async def _reconcile(self) -> None:
        """Read the whole history; route every unanswered call (before any of them runs, so
        a result later in the history is known)."""
        calls: list[Any] = []
        last_ended = False
        async for event in self.client.beta.sessions.events.list(self.session_id, limit=1000):
            if event.type == "agent.tool_use":
                calls.append(event)
            elif event.type == "user.tool_result":
                self._answered.add(event.tool_use_id)
            elif event.type == "user.tool_confirmation":
                self._verdicts[event.tool_use_id] = event.result
            elif event.type in _END:
                self._done.set()
            if event.type not in _NEUTRAL:
                last_ended = ends_turn(event)
        for call in calls:
            await self._route(call)
        for held in list(self._held.values()):
            if held.id in self._verdicts:
                await self._route(held)
        self._idle_since = time.monotonic() if last_ended else None

    async def _note(self, event: Any) -> None:
        """One live event."""
        kind = event.type
        if kind not in _NEUTRAL:
            self._idle_since = time.monotonic() if ends_turn(event) else None
        if kind == "agent.tool_use":
            await self._route(event)
        elif kind == "user.tool_result":
            self._answered.add(event.tool_use_id)
            self._held.pop(event.tool_use_id, None)
        elif kind == "user.tool_confirmation":
            self._verdicts[event.tool_use_id] = event.result
            held = self._held.get(event.tool_use_id)
            if held is not None:
                await self._route(held)
        elif kind in _END:
            log.info("session %s ended (%s)", self.session_id, kind)
            self._done.set()

    async def _route(self, call: Any) -> None:
        """Queue a call to run, hold it for its confirmation, or drop it."""
        if call.id in self._answered or (call.id in self._seen and call.id not in self._held):
            return
        permission = getattr(call, "evaluated_permission", None) or "allow"
        if permission == "deny":
            self._seen.add(call.id)
            return
        if permission == "ask":
            verdict = self._verdicts.get(call.id)
            if verdict is None:
                self._seen.add(call.id)
                self._held[call.id] = call
                return
            self._held.pop(call.id, None)
            if verdict != "allow":
                self._seen.add(call.id)
                return
        self._seen.add(call.id)
        await self._send.send(call)

    # ---- running -----------------------------------------------------------------------

    async def _dispatch_loop(self) -> None:
        async for call in self._receive:
            if call.id in self._answered:
                continue
            self._busy = True
            try:
                output = await self._run_one(call)
                await self._post(call.id, output)
            finally:
                self._busy = False

    async def _run_one(self, call: Any) -> ToolOutput:
        if call.name not in SANDBOX_TOOLS:
            return ToolOutput.text(
                f"The tool {call.name!r} is not available on this self-hosted worker "
                f"(it runs {', '.join(sorted(SANDBOX_TOOLS))}).",
                is_error=True,
            )
        self.executed += 1
        log.info("session %s: running %s (%s)", self.session_id, call.name, call.id)
        return await self.execute(call.name, dict(call.input or {}))

    async def _post(self, tool_use_id: str, output: ToolOutput) -> None:
        """Send the result; transient failures are retried for as long as the lease holds
        (the worker's heartbeat ends the run once it is lost), a refusal (the call was
        answered meanwhile, e.g. as lost) is final."""
        event: Any = {
            "type": "user.tool_result",
            "tool_use_id": tool_use_id,
            "content": output.content,
            "is_error": output.is_error,
        }
        delay = _BACKOFF_START
        while True:
            try:
                await self.client.beta.sessions.events.send(self.session_id, events=[event])
                self._answered.add(tool_use_id)
                return
            except anthropic.APIStatusError as exc:
                if exc.status_code < 500 and exc.status_code != 429:
                    log.warning("session %s: result for %s refused (%s): %s", self.session_id,
                                tool_use_id, exc.status_code, exc.message)  # fmt: skip
                    self._answered.add(tool_use_id)
                    return
            except anthropic.APIConnectionError as exc:
                log.warning("session %s: posting a result failed (%s)", self.session_id, exc)
            await anyio.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX)

    async def _idle_watch(self) -> None:
        while not self._done.is_set():
            await anyio.sleep(min(0.5, self.max_idle / 4))
            since = self._idle_since
            queued = self._receive.statistics().current_buffer_used
            quiet = not self._busy and not self._held and not queued
            if since is not None and quiet and time.monotonic() - since >= self.max_idle:
                log.info("session %s idle for %.0fs: leaving it", self.session_id, self.max_idle)
                self._done.set()
