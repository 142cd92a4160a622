"""The chaos run's client side: one driver per session that keeps an SSE stream open on one
API process, sends turns and answers custom tool calls through any API process.

It records what its stream showed (event ids in order) for the checker; it judges nothing.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
from _chaos_model import user_text
from tests.server import API_KEY

HEADERS = {"anthropic-beta": "managed-agents-2026-04-01", "x-api-key": API_KEY}


@dataclass(slots=True)
class Control:
    """Shared between the chaos monkey and the drivers."""

    more_turns: bool = True
    """Cleared when the kill budget is spent: drivers finish the turn they are in."""
    deadline: float = float("inf")
    """Monotonic time by which every session must have finished."""


@dataclass(slots=True)
class Record:
    """What one driver saw and did."""

    session_id: str
    marker: str
    stream_api: int
    stream_ids: list[str] = field(default_factory=list)
    stop_reasons: list[str] = field(default_factory=list)
    turns: int = 0
    custom_answered: int = 0
    finished: bool = False
    stream_broken: str | None = None
    errors: list[str] = field(default_factory=list)


async def sse_frames(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event name or ":comment", data) per SSE frame of a streaming response."""
    name, data = "", []
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield line, ""
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and (name or data):
            yield name, "\n".join(data)
            name, data = "", []


class SessionDriver:
    """Drives one session turn after turn until `Control.more_turns` is cleared."""

    def __init__(
        self,
        record: Record,
        stream_url: str,
        http: httpx.AsyncClient,
        sdks: Sequence[anthropic.AsyncAnthropic],
        control: Control,
        rng: random.Random,
    ) -> None:
        self.record = record
        self.stream_url = stream_url
        self.http = http
        self.sdks = sdks
        self.control = control
        self.rng = rng
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.connected = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Open the stream, then play turns; never raises (failures go into the record)."""
        # The reader outlives run(): late (stale) appends must still reach the record.
        self._reader = asyncio.create_task(self._read())
        try:
            await asyncio.wait_for(self.connected.wait(), 60)
            await self._turns()
        except Exception as exc:
            self.record.errors.append(f"{type(exc).__name__}: {exc}")

    async def close(self) -> None:
        """Stop reading the stream."""
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        path = f"{self.stream_url}/v1/sessions/{self.record.session_id}/events/stream"
        try:
            async with self.http.stream("GET", path, headers=HEADERS, timeout=None) as response:
                response.raise_for_status()
                async for name, data in sse_frames(response):
                    if name == ": connected":
                        self.connected.set()
                    elif name and not name.startswith(":") and name != "ping":
                        body = json.loads(data)
                        self.record.stream_ids.append(str(body.get("id")))
                        self.inbox.put_nowait(body)
            self.record.stream_broken = "stream ended"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.record.stream_broken = f"{type(exc).__name__}: {exc}"

    def _sdk(self) -> anthropic.AsyncAnthropic:
        return self.rng.choice(self.sdks)

    async def _send(self, events: list[dict[str, Any]]) -> None:
        sid = self.record.session_id
        await self._sdk().beta.sessions.events.send(sid, events=events)  # type: ignore[arg-type]

    async def _turns(self) -> None:
        while True:
            turn = self.record.turns
            text = user_text(self.record.marker, turn)
            await self._send(
                [{"type": "user.message", "content": [{"type": "text", "text": text}]}]
            )
            self.record.turns += 1
            reason = await self._until_turn_ends()
            if reason is None:
                return
            self.record.stop_reasons.append(reason)
            if not self.control.more_turns:
                self.record.finished = True
                return
            await asyncio.sleep(self.rng.uniform(0.0, 0.5))

    async def _until_turn_ends(self) -> str | None:
        """Answer custom tools until an idle that is not requires_action; None at deadline."""
        answered: set[str] = set()
        while True:
            left = self.control.deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                body = await asyncio.wait_for(self.inbox.get(), min(left, 5.0))
            except TimeoutError:
                if self.record.stream_broken:
                    return None
                continue
            if body.get("type") != "session.status_idle":
                continue
            stop = body.get("stop_reason") or {}
            if stop.get("type") != "requires_action":
                return str(stop.get("type"))
            todo = [i for i in stop.get("event_ids") or [] if i not in answered]
            if todo:
                await asyncio.sleep(self.rng.uniform(0.0, 1.0))  # kills land while waiting
                await self._send([_answer(i) for i in todo])
                answered.update(todo)
                self.record.custom_answered += len(todo)


def _answer(event_id: str) -> dict[str, Any]:
    return {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": event_id,
        "content": [{"type": "text", "text": f"value for {event_id}"}],
    }
