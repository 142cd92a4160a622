"""The scale benchmark's load: many sessions each playing one multi-step turn at once, over
bare keep-alive sockets; notes sessions finished per second and time to first token after
every client input. Asserts no timings; judges nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from _chaos_model import TOOLS, user_text
from _http import Conn
from tests.server import API_KEY

HEADERS = {"anthropic-beta": "managed-agents-2026-04-01", "x-api-key": API_KEY}


@dataclass(slots=True)
class Round:
    """One measured burst."""

    sessions: int
    seconds: float
    ttft: list[float] = field(default_factory=list)
    """Seconds from a client input (message or tool result) to the next first text delta."""
    errors: int = 0
    busy: float = 0.0
    """Fraction of all CPUs busy during the round (/proc/stat)."""
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds per kind of process during the round."""

    @property
    def rate(self) -> float:
        return self.sessions / self.seconds


class Tracked:
    """One session: its SSE stream (with previews) and its own send connection."""

    def __init__(self, session_id: str, port: int) -> None:
        self.session_id = session_id
        self.marker = f"chx{secrets.token_hex(5)}"
        self.stream = Conn("127.0.0.1", port, HEADERS)
        self.sender = Conn("127.0.0.1", port, HEADERS)
        self.lock = asyncio.Lock()
        self.connected = asyncio.Event()
        self.done = asyncio.Event()
        self.sent_at = 0.0
        self.waiting = False
        self.ttft: list[float] = []
        self.errors = 0
        self.turn = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def follow(self) -> None:
        """Read the stream until cancelled."""
        path = f"/v1/sessions/{self.session_id}/events/stream?event_deltas=agent.message"
        await self.stream.open()
        name = b""
        async for line in self.stream.stream_lines("GET", path):
            if line.startswith(b"event: "):
                name = line[7:].strip()
                if name == b"event_delta" and self.waiting:
                    self.ttft.append(time.perf_counter() - self.sent_at)
                    self.waiting = False
            elif line.startswith(b"data: ") and name == b"session.status_idle":
                self._idle(json.loads(line[6:]))
            elif line.startswith(b"data: ") and name == b"session.error":
                self.errors += 1
            elif line.startswith(b": connected"):
                self.connected.set()

    def _idle(self, body: dict[str, Any]) -> None:
        stop = body.get("stop_reason") or {}
        if stop.get("type") != "requires_action":
            self.done.set()
            return
        answers = [
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": event_id,
                "content": [{"type": "text", "text": "ok"}],
            }
            for event_id in stop.get("event_ids") or []
        ]
        task = asyncio.create_task(self.send(answers))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def send(self, events: list[dict[str, Any]]) -> None:
        """POST client events, noting the time for the next first-token sample."""
        async with self.lock:
            self.sent_at, self.waiting = time.perf_counter(), True
            await self.sender.request(
                "POST", f"/v1/sessions/{self.session_id}/events", {"events": events}
            )

    async def play_turn(self) -> None:
        """One user turn; returns when the turn's final idle arrived."""
        self.done = asyncio.Event()
        text = user_text(self.marker, self.turn)
        self.turn += 1
        await self.send([{"type": "user.message", "content": [{"type": "text", "text": text}]}])
        await self.done.wait()

    async def close(self) -> None:
        await self.stream.close()
        await self.sender.close()


def _role(pid: int, comm: str, cmdline: str) -> str | None:
    if pid == os.getpid():
        return "load client"
    if comm == "postgres":
        return "postgres"
    for needle, role in (
        ("_scale_fake", "fake model"),
        (" serve ", "api/serve"),
        (" worker ", "workers"),
        ("bwrap", "sandboxes"),
        ("_agent", "sandboxes"),
    ):
        if needle in cmdline:
            return role
    return None


def cpu_by_role() -> dict[str, float]:
    """CPU seconds used so far by the benchmark's processes (this one, its descendants and
    PostgreSQL), by kind (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, str, str, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry.name}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        fields = tail.split()
        cpu = (int(fields[11]) + int(fields[12])) / tick
        procs[int(entry.name)] = (int(fields[1]), head.split("(", 1)[1], f" {cmdline} ", cpu)
    mine = {os.getpid()}
    for _ in range(6):  # descendants, a few generations deep
        mine |= {pid for pid, (ppid, *_) in procs.items() if ppid in mine}
    out: dict[str, float] = {}
    for pid, (_, comm, cmdline, cpu) in procs.items():
        role = _role(pid, comm, cmdline)
        if role is not None and (pid in mine or role == "postgres"):
            out[role] = out.get(role, 0.0) + cpu
    return out


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


async def create_sessions(port: int, count: int) -> list[str]:
    """An agent with the chaos tools and `count` sessions of it, through the API."""
    api = await Conn("127.0.0.1", port, HEADERS).open()
    try:
        agent = await api.request(
            "POST", "/v1/agents", {"model": "claude-sonnet-4-5", "name": "scale", "tools": TOOLS}
        )
        env = await api.request(
            "POST", "/v1/environments", {"name": "scale", "config": {"type": "cloud"}}
        )
        body = {"agent": agent["id"], "environment_id": env["id"]}
        return [(await api.request("POST", "/v1/sessions", body))["id"] for _ in range(count)]
    finally:
        await api.close()


async def open_sessions(ports: list[int], count: int) -> list[Tracked]:
    """`count` new sessions with their streams connected, spread over the API processes."""
    ids = await create_sessions(ports[0], count)
    tracked = [Tracked(sid, ports[i % len(ports)]) for i, sid in enumerate(ids)]
    for t in tracked:
        t.tasks.add(asyncio.create_task(t.follow()))
    await asyncio.wait_for(asyncio.gather(*(t.connected.wait() for t in tracked)), 120)
    return tracked


async def run_round(tracked: list[Tracked], timeout: float = 600) -> Round:
    """Every session plays one turn at once; wall time until the last one is idle."""
    for t in tracked:
        t.ttft, t.errors = [], 0
    busy0, total0 = cpu_ticks()
    roles0 = cpu_by_role()
    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(t.play_turn() for t in tracked)), timeout)
    seconds = time.perf_counter() - start
    busy1, total1 = cpu_ticks()
    result = Round(sessions=len(tracked), seconds=seconds)
    result.busy = (busy1 - busy0) / max(total1 - total0, 1)
    roles1 = cpu_by_role()
    result.cpu = {k: v - roles0.get(k, 0.0) for k, v in roles1.items()}
    for t in tracked:
        result.ttft.extend(t.ttft)
        result.errors += t.errors
    return result


async def close_all(tracked: list[Tracked]) -> None:
    """Stop every stream."""
    for t in tracked:
        for task in list(t.tasks):
            task.cancel()
        await asyncio.gather(*t.tasks, return_exceptions=True)
        await t.close()


async def measure(ports: list[int], sessions: int, warmup: int, rounds: int) -> list[Round]:
    """A warm-up round of `warmup` sessions, then `rounds` measured rounds of `sessions`."""
    if warmup:
        warm = await open_sessions(ports, warmup)
        await run_round(warm)
        await close_all(warm)
    tracked = await open_sessions(ports, sessions)
    random.shuffle(tracked)
    try:
        return [await run_round(tracked) for _ in range(rounds)]
    finally:
        await close_all(tracked)
