"""Store-level measurements for the scale benchmark: event-append throughput through the
`Store` contract, and SSE fan-out latency from an append in this process (standing in for a
worker) to clients streaming from API processes. Asserts no timings.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from _http import Conn
from _scale_load import HEADERS, create_sessions

from corral.ids import new_id
from corral.session.log import Fence
from corral.store.base import SessionRow, Store


@dataclass(frozen=True, slots=True, kw_only=True)
class Appends:
    """One append-throughput configuration."""

    name: str
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def _event() -> dict[str, object]:
    return {"id": new_id("sevt"), "type": "session.updated", "title": "bench"}


async def _session(store: Store) -> str:
    row = SessionRow(
        id=new_id("sesn"),
        created_at="2025-01-01T00:00:00.000000Z",
        environment_id="env_bench",
        agent_id="agent_bench",
        agent_version=1,
        body={"title": None, "metadata": {}},
    )
    await store.create_session(row, [])
    return row.id


async def append_throughput(
    store: Store, label: str, *, total: int, sessions: int
) -> list[Appends]:
    """Sequential one-event appends, then `sessions` concurrent appenders (unfenced, as the
    API appends) and the same with brain leases (fenced, as workers append)."""
    sid = await _session(store)
    start = time.perf_counter()
    for _ in range(total // 4):
        await store.append(sid, [_event()])
    seconds = time.perf_counter() - start
    out = [Appends(name=f"{label} sequential", events=total // 4, seconds=seconds)]
    per = max(total // sessions, 1)
    for fenced in (False, True):
        fences = await _fences(store, sessions, fenced)

        async def writer(session_id: str, fence: Fence | None) -> None:
            for _ in range(per):
                await store.append(session_id, [_event()], fence=fence)

        start = time.perf_counter()
        await asyncio.gather(*(writer(s, f) for s, f in fences.items()))
        name = f"{label} {sessions} concurrent {'fenced' if fenced else 'unfenced'}"
        out.append(Appends(name=name, events=per * sessions, seconds=time.perf_counter() - start))
    return out


async def _fences(store: Store, count: int, fenced: bool) -> dict[str, Fence | None]:
    """`count` fresh sessions, each with a claimed lease when `fenced`."""
    sids = [await _session(store) for _ in range(count)]
    if not fenced:
        return dict.fromkeys(sids)
    for sid in sids:
        await store.wake(sid)
    fences: dict[str, Fence | None] = {}
    while len(fences) < count:
        fence = await store.claim("bench", 300.0)
        if fence is not None:
            fences[fence.session_id] = fence
    return fences


@dataclass(slots=True)
class Fanout:
    """Latencies of one fan-out run."""

    from_call: list[float] = field(default_factory=list)
    """Append call start -> client receipt."""
    from_commit: list[float] = field(default_factory=list)
    """Append returned (committed) -> client receipt."""
    missing: int = 0


async def fanout_latency(
    store: Store, ports: list[int], *, sessions: int, appends: int, rate: float
) -> Fanout:
    """Every session streamed once on each API process; `appends` events appended one at a
    time from here, round-robin over the sessions at `rate` per second, each timed on every
    stream. Paced rather than in bursts, so no append waits for a pool connection."""
    sids = await create_sessions(ports[0], sessions)
    marks: dict[str, tuple[float, float]] = {}
    arrivals: list[tuple[str, float]] = []
    readers = [asyncio.create_task(_read(port, sid, arrivals)) for sid in sids for port in ports]
    result = Fanout()
    try:
        await asyncio.sleep(1.0)  # let every stream connect
        start = time.perf_counter()
        for number in range(appends):
            await asyncio.sleep(max(0.0, start + number / rate - time.perf_counter()))
            await _append_marked(store, sids[number % len(sids)], marks)
        await asyncio.sleep(1.0)
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    for event_id, at in arrivals:
        if event_id in marks:
            called, committed = marks[event_id]
            result.from_call.append(at - called)
            result.from_commit.append(at - committed)
    result.missing = len(marks) * len(ports) - len(result.from_call)
    return result


async def _append_marked(
    store: Store, session_id: str, marks: dict[str, tuple[float, float]]
) -> None:
    event = _event()
    called = time.perf_counter()
    await store.append(session_id, [event])
    marks[str(event["id"])] = (called, time.perf_counter())


async def _read(port: int, session_id: str, arrivals: list[tuple[str, float]]) -> None:
    conn = await Conn("127.0.0.1", port, HEADERS).open()
    try:
        async for line in conn.stream_lines("GET", f"/v1/sessions/{session_id}/events/stream"):
            if line.startswith(b"data: "):
                at = time.perf_counter()
                arrivals.append((str(json.loads(line[6:]).get("id")), at))
    finally:
        await conn.close()
