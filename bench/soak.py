"""Soak: one embedded server (`corral serve`, SQLite) under a steady, modest load for a long
time, sampled for growth. What must stay flat is what a server running for weeks accumulates:
open files, threads, memory, the database's WAL.

Usage: uv run python bench/soak.py [--duration 1800] [--sessions 30] [--warmup 300]
       [--sample 10] [--sandbox-idle 60] [--quiet-every 120] [--quiet 15] [--json FILE]
       [--memprobe DIR [--memprobe-every 60] [--tracemalloc FRAMES]]

Each session plays turns of `--steps` bash calls (real bubblewrap sandboxes) and a final text,
against the wire-level fake model, following its SSE stream; a stream is dropped mid-turn now
and then and reconnected (catching up through `events.list`, as a client must). Sessions think
between turns, some longer than `--sandbox-idle`, so sandboxes are reaped and provisioned again;
every `--quiet-every` seconds all sessions pause together for `--quiet` seconds, longer than
a worker thread's idle timeout (10 s), the spells in which per-thread resources used to leak.
The server's RSS, open files (all, and those on corral.db), threads, and the database and WAL
sizes are sampled every `--sample` seconds; after `--warmup` the least-squares slope of each is
printed per hour, with the load average. Asserts no timings. `--memprobe` splits the server's
memory (Python heap, SQLite, malloc) into DIR/mem.jsonl, see bench/_memprobe/sitecustomize.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import _util
import anthropic
import httpx
from _chaos_client import sse_frames
from tests.fakes.messages_server import FakeModelServer
from tests.fakes.model_script import Reply, Text, ToolUse, Turn
from tests.server import API_KEY, ServerProcess

HEADERS = {"anthropic-beta": "managed-agents-2026-04-01", "x-api-key": API_KEY}
TAG = "[soak]"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add = parser.add_argument
    add("--duration", type=float, default=1800.0, help="seconds of load")
    add("--sessions", type=int, default=30, help="concurrent sessions")
    add("--warmup", type=float, default=-1, help="seconds before slopes count (-1: duration/5)")
    add("--sample", type=float, default=10.0, help="seconds between samples")
    add("--steps", type=int, default=2, help="bash calls per turn")
    add("--think", type=float, default=4.0, help="mean seconds a session waits between turns")
    add("--sandbox-idle", type=float, default=60.0, help="server's sandbox_idle_seconds")
    add("--quiet-every", type=float, default=120.0, help="seconds between global quiet spells")
    add("--quiet", type=float, default=15.0, help="seconds of each global quiet spell")
    add("--drop", type=float, default=0.2, help="chance a turn's stream is dropped mid-turn")
    add("--memo-mib", type=int, default=64, help="server's brain_memo_mib (small: fills early)")
    add("--seed", type=int, default=1)
    add("--json", type=Path, help="also write samples and slopes as JSON here")
    add("--memprobe", type=Path, help="dir for the server's memory readings (bench/_memprobe)")
    add("--memprobe-every", type=float, default=60.0, help="seconds between memory readings")
    add("--tracemalloc", type=int, default=0, help="frames traced with --memprobe (0: off)")
    args = parser.parse_args(argv)
    if args.warmup < 0:
        args.warmup = args.duration / 5
    return args


# ---- the model -------------------------------------------------------------------------------


def soak_model(steps: int) -> Any:
    """The fake's handler: `steps` bash calls after each tagged user message, then a text."""

    def reply(request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or []
        opened = max(
            (i for i, m in enumerate(messages) if m.get("role") == "user" and TAG in _text(m)),
            default=0,
        )
        step = sum(1 for m in messages[opened + 1 :] if m.get("role") == "assistant")
        if step < steps:
            command = "echo step >> /workspace/soak.log && wc -l < /workspace/soak.log"
            return Turn([Text(f"Step {step}."), ToolUse("bash", {"command": command})])
        return Turn([Text("Done with this turn.")])

    return reply


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    blocks = content if isinstance(content, list) else []
    return " ".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


# ---- the clients -----------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """What the sessions did."""

    turns: int = 0
    bash_results: int = 0
    reconnects: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Clock:
    """Shared by the drivers: when to stop, and the global quiet spells."""

    start: float
    stop: float
    quiet_every: float
    quiet: float

    def quiet_left(self) -> float:
        """Seconds left of the current quiet spell (0 outside one)."""
        into = (time.monotonic() - self.start) % self.quiet_every
        return max(0.0, self.quiet_every - into) if into > self.quiet_every - self.quiet else 0.0


class Driver:
    """Plays one session's turns until the clock stops."""

    def __init__(
        self,
        session_id: str,
        server: str,
        sdk: anthropic.AsyncAnthropic,
        http: httpx.AsyncClient,
        args: argparse.Namespace,
        clock: Clock,
        tally: Tally,
    ) -> None:
        self.sid, self.server, self.sdk, self.http = session_id, server, sdk, http
        self.args, self.clock, self.tally = args, clock, tally
        self.rng = random.Random(f"{args.seed}/{session_id}")

    async def run(self) -> None:
        while time.monotonic() < self.clock.stop:
            try:
                await asyncio.wait_for(self._turn(), 300)
                self.tally.turns += 1
            except Exception as exc:  # a soak reports failures, it does not stop on them
                self.tally.errors.append(f"{self.sid}: {type(exc).__name__}: {exc}")
            await asyncio.sleep(self._pause())

    def _pause(self) -> float:
        # Mostly short thinks; one in ten longer than the sandbox idle time (a reap).
        if self.rng.random() < 0.1:
            return self.args.sandbox_idle + self.rng.uniform(1.0, 10.0)
        return self.rng.expovariate(1 / self.args.think) + self.clock.quiet_left()

    async def _turn(self) -> None:
        """Send a message with a stream open; drop and reopen the stream now and then."""
        drop = self.rng.random() < self.args.drop
        async with self._stream() as frames:
            sent = await self.sdk.beta.sessions.events.send(
                self.sid,
                events=[{"type": "user.message", "content": [{"type": "text", "text": TAG}]}],
            )
            mine = sent.data[0].id
            if await self._follow(frames, stop_after=1 if drop else None):
                return
        self.tally.reconnects += 1
        async with self._stream() as frames:
            if await self._caught_up(mine):
                return
            await self._follow(frames, stop_after=None)

    def _stream(self) -> Any:
        path = f"{self.server}/v1/sessions/{self.sid}/events/stream"
        return _Stream(self.http, path)

    async def _follow(self, frames: Any, stop_after: int | None) -> bool:
        """True once the turn ended; False when told to drop after `stop_after` events."""
        seen = 0
        async for name, data in frames:
            if name.startswith(":") or name in ("", "ping"):
                continue
            seen += 1
            body = json.loads(data)
            if body.get("type") == "agent.tool_result":
                self.tally.bash_results += 1
            if _ends_turn(body):
                return True
            if stop_after is not None and seen >= stop_after:
                return False
        raise RuntimeError("stream ended mid-turn")

    async def _caught_up(self, mine: str) -> bool:
        """Whether the turn ended while no stream was open (the log says; newest first)."""
        page = await self.sdk.beta.sessions.events.list(self.sid, order="desc", limit=50)
        for event in page.data:
            if event.id == mine:
                return False
            if _ends_turn(event.model_dump()):
                return True
        return False


class _Stream:
    """An SSE stream, yielding frames once the server said it is connected."""

    def __init__(self, http: httpx.AsyncClient, path: str) -> None:
        self.http, self.path = http, path
        self._cm: Any = None

    async def __aenter__(self) -> Any:
        self._cm = self.http.stream("GET", self.path, headers=HEADERS, timeout=None)
        response = await self._cm.__aenter__()
        response.raise_for_status()
        frames = sse_frames(response)
        async for name, _ in frames:
            if name == ": connected":
                return frames
        raise RuntimeError("stream closed before connecting")

    async def __aexit__(self, *exc: object) -> None:
        await self._cm.__aexit__(*exc)


def _ends_turn(body: dict[str, Any]) -> bool:
    stop = body.get("stop_reason") or {}
    return body.get("type") == "session.status_idle" and stop.get("type") != "requires_action"


# ---- sampling --------------------------------------------------------------------------------

METRICS = ("rss_mib", "fds", "db_fds", "threads", "db_mib", "wal_mib")


def sample(pid: int, db: Path, elapsed: float) -> dict[str, float]:
    """One reading of the server process and its database files."""
    fds = db_fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        fds += 1
        try:
            db_fds += os.readlink(f"/proc/{pid}/fd/{fd}") == str(db)
        except OSError:
            continue
    status = Path(f"/proc/{pid}/status").read_text()
    threads = next(int(line.split()[1]) for line in status.splitlines() if line[:8] == "Threads:")
    wal = db.with_name(db.name + "-wal")
    return {
        "t": elapsed,
        "rss_mib": _util.rss_kib(pid) / 1024,
        "fds": fds,
        "db_fds": db_fds,
        "threads": threads,
        "db_mib": db.stat().st_size / 2**20,
        "wal_mib": (wal.stat().st_size if wal.exists() else 0) / 2**20,
    }


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per hour."""
    n = len(points)
    if n < 2:
        return float("nan")
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 3600 if var else 0.0


async def sampler(
    pid: int, db: Path, clock: Clock, every: float, out: list[dict[str, float]]
) -> None:
    while time.monotonic() < clock.stop:
        reading = sample(pid, db, time.monotonic() - clock.start)
        out.append(reading)
        print(
            "  t={t:5.0f}s rss={rss_mib:6.1f}MiB fds={fds:4.0f} db_fds={db_fds:3.0f} "
            "threads={threads:3.0f} db={db_mib:6.1f}MiB wal={wal_mib:5.1f}MiB".format(**reading),
            flush=True,
        )
        await asyncio.sleep(every)


# ---- the run ---------------------------------------------------------------------------------


async def play(
    server: ServerProcess, args: argparse.Namespace
) -> tuple[Tally, list[dict[str, float]]]:
    sdk = anthropic.AsyncAnthropic(base_url=server.url, api_key=API_KEY, max_retries=2)
    agent = await sdk.beta.agents.create(
        model="claude-sonnet-4-5",
        name="soak",
        tools=[{"type": "agent_toolset_20260401"}],  # type: ignore[list-item]
    )
    env = await sdk.beta.environments.create(name="soak", config={"type": "cloud"})
    ids = [
        (await sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)).id
        for _ in range(args.sessions)
    ]
    now = time.monotonic()
    clock = Clock(now, now + args.duration, args.quiet_every, args.quiet)
    tally, samples = Tally(), []
    assert server.proc is not None
    limits = httpx.Limits(max_connections=args.sessions * 3)
    async with httpx.AsyncClient(limits=limits) as http:
        drivers = [Driver(i, server.url, sdk, http, args, clock, tally) for i in ids]
        await asyncio.gather(
            sampler(server.proc.pid, server.data_dir / "corral.db", clock, args.sample, samples),
            *(d.run() for d in drivers),
        )
    await sdk.close()
    return tally, samples


def report(
    args: argparse.Namespace, tally: Tally, samples: list[dict[str, float]]
) -> dict[str, Any]:
    after = [s for s in samples if s["t"] >= args.warmup]
    first, last = (after[0], after[-1]) if after else ({}, {})
    slopes = {m: slope_per_hour([(s["t"], s[m]) for s in after]) for m in METRICS}
    rows = [
        [
            m,
            f"{first.get(m, float('nan')):.1f}",
            f"{last.get(m, float('nan')):.1f}",
            f"{slopes[m]:+.1f}",
        ]
        for m in METRICS
    ]
    load = os.getloadavg()
    print()
    print(f"after {args.warmup:.0f} s of warm-up, {len(after)} samples:")
    print(_util.table(["metric", "first", "last", "slope per hour"], rows))
    print()
    totals = [
        ["sessions", args.sessions],
        ["turns", tally.turns],
        ["bash results", tally.bash_results],
        ["stream reconnects", tally.reconnects],
        ["errors", len(tally.errors)],
        ["load average (1, 5, 15 min)", " ".join(f"{x:.2f}" for x in load)],
    ]
    print(_util.table(["soak", "value"], totals))
    for error in tally.errors[:10]:
        print(f"  error: {error}")
    return {"slopes_per_hour": slopes, "tally": asdict(tally), "loadavg": load, "samples": samples}


def _memprobe_env(args: argparse.Namespace) -> dict[str, str]:
    """The server's environment for `--memprobe`: bench/_memprobe's sitecustomize on the path."""
    if not args.memprobe:
        return {}
    site = str(Path(__file__).parent / "_memprobe")
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p),
        "SOAK_MEMPROBE": str(args.memprobe.resolve()),
        "SOAK_MEMPROBE_EVERY": str(args.memprobe_every),
    }
    if args.tracemalloc:
        env["PYTHONTRACEMALLOC"] = str(args.tracemalloc)
    return env


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _util.raise_nofile()
    _util.stop_on_signals()
    root = _util.disk_tempdir("corral-soak-")
    data = root / "data"
    data.mkdir()
    (data / "corral.toml").write_text(
        f"[server]\nsandbox_idle_seconds = {args.sandbox_idle}\nbrain_memo_mib = {args.memo_mib}\n"
    )
    print(
        f"soak: {args.duration:.0f} s, {args.sessions} sessions, {args.steps} bash calls a turn, "
        f"sandbox idle {args.sandbox_idle:.0f} s, quiet {args.quiet:.0f} s every "
        f"{args.quiet_every:.0f} s; dir {root}",
        flush=True,
    )
    try:
        with FakeModelServer(soak_model(args.steps)) as fake:
            server = ServerProcess(data, model_url=fake.url, env=_memprobe_env(args))
            server.start()
            try:
                tally, samples = asyncio.run(play(server, args))
            finally:
                server.stop()
    finally:
        _util.remove_tempdir(root)
    result = report(args, tally, samples)
    if args.json:
        args.json.write_text(json.dumps(result))
    return 0 if not tally.errors else 1


if __name__ == "__main__":
    sys.exit(main())
