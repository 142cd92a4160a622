"""Brain costs, measured side by side in one run (real server subprocess, fake model subprocess,
loopback only):

1. per-step cost vs log length: `events.send` -> `span.model_request_start` on a session whose
   log holds ~100 events and on one holding ~10,000, interleaved trial by trial;
2. server CPU per text-only turn (utime + stime of the server process over N turns, divided by
   N, split into its event-loop thread and the rest: SQLite's writer and readers) on SQLite
   and, with --admin-url reachable, on PostgreSQL; then a cProfile of each server's event loop
   over N/2 more turns (enabled only for them, so neither start-up nor the profiler's own cost
   is in the CPU figures) saying where the time goes;
3. sustained load: `--sessions` active sessions sending at a steady rate set to half the
   capacity measured in a short burst; Corral's overhead over the fake's first-token delay.

Usage: uv run python bench/brain.py [--trials 30] [--turns 200] [--sessions 200] [--delay 0.05]
Asserts no timings; prints tables and the goals of the brain issue next to the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pstats
import random
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _util
from _cluster import DEFAULT_ADMIN_URL, fresh_database
from _fake import fake_model
from _http import Conn
from tests.server import API_KEY, ServerProcess

HEADERS = {"anthropic-beta": "managed-agents-2026-04-01", "x-api-key": API_KEY}
BATCH = 50
"""User messages per POST while growing a long log (one model turn answers a whole batch)."""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add = parser.add_argument
    add("--trials", type=int, default=30, help="interleaved sends per log length")
    add("--long", type=int, default=10_000, help="events in the long session's log")
    add("--turns", type=int, default=200, help="text-only turns for the CPU measurement")
    add("--sessions", type=int, default=200, help="active sessions in the sustained run")
    add("--seconds", type=float, default=30.0, help="length of the sustained run")
    add("--delay", type=float, default=0.05, help="fake model first-token delay (s)")
    add("--admin-url", default=os.environ.get("CORRAL_TEST_DATABASE_URL", DEFAULT_ADMIN_URL))
    add("--skip-postgres", action="store_true")
    add("--only-postgres", action="store_true", help="measure 2. on PostgreSQL only")
    add("--only-cpu", action="store_true", help="measure 2. only (no 1. and 3.)")
    add("--keep-profiles", type=Path, help="copy the cProfile dumps of 2. into this dir")
    return parser.parse_args()


# ---- one session on the wire ------------------------------------------------------------


class Watched:
    """A session with an SSE reader noting when a `span.model_request_start` and an idle come."""

    def __init__(self, session_id: str, port: int) -> None:
        self.id = session_id
        self.stream = Conn("127.0.0.1", port, HEADERS)
        self.sender = Conn("127.0.0.1", port, HEADERS)
        self.connected = asyncio.Event()
        self.started = asyncio.Event()
        self.idle = asyncio.Event()
        self.first_delta = asyncio.Event()
        self.marks: dict[str, float] = {}
        self.t0 = 0.0

    def arm(self) -> None:
        self.started, self.idle, self.first_delta = (
            asyncio.Event(),
            asyncio.Event(),
            asyncio.Event(),
        )
        self.marks = {}

    async def follow(self) -> None:
        path = f"/v1/sessions/{self.id}/events/stream?event_deltas=agent.message"
        await self.stream.open()
        async for line in self.stream.stream_lines("GET", path):
            now = time.perf_counter()
            if line.startswith(b": connected"):
                self.connected.set()
            elif line.startswith(b"event: span.model_request_start"):
                self.marks.setdefault("start", now)
                self.started.set()
            elif line.startswith(b"event: event_delta"):
                self.marks.setdefault("delta", now)
                self.first_delta.set()
            elif line.startswith(b"event: session.status_idle"):
                self.idle.set()

    async def send(self, count: int = 1) -> None:
        text = {"type": "user.message", "content": [{"type": "text", "text": "hello"}]}
        self.arm()
        self.t0 = time.perf_counter()
        await self.sender.request(
            "POST", f"/v1/sessions/{self.id}/events", {"events": [text] * count}
        )

    async def turn(self, count: int = 1) -> None:
        await self.send(count)
        await asyncio.wait_for(self.idle.wait(), 120)


async def new_sessions(port: int, count: int) -> list[Watched]:
    conn = await Conn("127.0.0.1", port, HEADERS).open()
    agent = await conn.request(
        "POST", "/v1/agents", {"name": "bench", "model": "claude-sonnet-4-5"}
    )
    env = await conn.request(
        "POST", "/v1/environments", {"name": "bench", "config": {"type": "cloud"}}
    )
    watched = []
    for _ in range(count):
        body = {"agent": agent["id"], "environment_id": env["id"]}
        session = await conn.request("POST", "/v1/sessions", body)
        watched.append(Watched(session["id"], port))
    await conn.close()
    return watched


@contextlib.contextmanager
def followed(watched: list[Watched]) -> Iterator[list[asyncio.Task[None]]]:
    tasks = [asyncio.ensure_future(w.follow()) for w in watched]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()


# ---- 1. per-step cost vs log length -------------------------------------------------------


async def step_cost(server: ServerProcess, args: argparse.Namespace) -> None:
    short, long = await new_sessions(server.port, 2)
    with followed([short, long]):
        await asyncio.gather(short.connected.wait(), long.connected.wait())
        await short.turn(15)  # ~100 events: 15 messages + spans, statuses and answers
        grown = 0
        while grown < args.long:
            await long.turn(BATCH)
            grown += BATCH + 5
        samples: dict[str, list[float]] = {"short": [], "long": []}
        for _ in range(args.trials):
            pair = [("short", short), ("long", long)]
            random.shuffle(pair)
            for name, w in pair:
                await w.turn()
                samples[name].append(w.marks["start"] - w.t0)
    p50 = {k: _util.percentile(v, 50) for k, v in samples.items()}
    p95 = {k: _util.percentile(v, 95) for k, v in samples.items()}
    ratio = p50["long"] / p50["short"]
    print("\n1. events.send -> span.model_request_start, by log length (ms)")
    rows = [["~100 events", _util.ms(p50["short"]), _util.ms(p95["short"])],
            [f"~{args.long:,} events", _util.ms(p50["long"]), _util.ms(p95["long"])]]  # fmt: skip
    print(_util.table(["log", "p50", "p95"], rows))
    print(f"long/short p50 ratio: {ratio:.2f} (goal <= 1.2: {_util.verdict(ratio <= 1.2)})")


# ---- 2. CPU per text-only turn ------------------------------------------------------------


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """utime + stime of a process (all its threads, live or gone), or of one of its threads."""
    stat = Path(f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat")
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class TurnCpu:
    """Server CPU seconds per turn: the whole process and its event-loop (main) thread."""

    total: float
    loop: float

    def describe(self) -> str:
        return (
            f"{self.total * 1000:.1f} ms (event loop {self.loop * 1000:.1f}, "
            f"other threads {(self.total - self.loop) * 1000:.1f})"
        )


async def turns_cpu(server: ServerProcess, turns: int, profile: Path | None = None) -> TurnCpu:
    """CPU per turn over `turns` turns; then, when `profile` is given, `turns // 2` more
    turns under the server's profiler, dumped to `profile`."""
    watched = await new_sessions(server.port, 10)
    assert server.proc is not None
    pid = server.proc.pid
    with followed(watched):
        await asyncio.gather(*(w.connected.wait() for w in watched))
        for w in watched:  # warm-up
            await w.turn()
        total, loop = cpu_seconds(pid), cpu_seconds(pid, pid)
        for i in range(turns):
            await watched[i % len(watched)].turn()
        cpu = TurnCpu((cpu_seconds(pid) - total) / turns, (cpu_seconds(pid, pid) - loop) / turns)
        if profile is not None:
            os.kill(pid, signal.SIGUSR1)
            await asyncio.sleep(0.2)
            for i in range(turns // 2):
                await watched[i % len(watched)].turn()
            os.kill(pid, signal.SIGUSR2)
            await asyncio.to_thread(_wait_for_file, profile)
        return cpu


# ---- 3. sustained load --------------------------------------------------------------------


async def sustained(server: ServerProcess, args: argparse.Namespace) -> None:
    watched = await new_sessions(server.port, args.sessions)
    with followed(watched):
        await asyncio.gather(*(w.connected.wait() for w in watched))
        start = time.perf_counter()
        await asyncio.gather(*(w.turn() for w in watched))  # burst: capacity estimate
        capacity = len(watched) / (time.perf_counter() - start)
        rate = capacity / 2
        overheads: list[float] = []
        deadline = time.perf_counter() + args.seconds
        pending: set[asyncio.Future[None]] = set()
        next_at, i = time.perf_counter(), 0

        async def one(w: Watched) -> None:
            await w.turn()
            if "delta" in w.marks:
                overheads.append(w.marks["delta"] - w.t0 - args.delay)

        free = list(watched)
        while time.perf_counter() < deadline:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += 1 / rate
            if not free:
                continue  # every session busy: the offered rate is above what is served
            w = free.pop(0)
            task = asyncio.ensure_future(one(w))
            task.add_done_callback(lambda _t, w=w: free.append(w))
            pending.add(task)
            i += 1
        await asyncio.gather(*pending)
    p50, p95 = _util.percentile(overheads, 50), _util.percentile(overheads, 95)
    print(f"\n3. sustained: {args.sessions} sessions, burst capacity {capacity:.0f} turns/s, "
          f"offered {rate:.0f}/s for {args.seconds:.0f} s, {len(overheads)} turns")  # fmt: skip
    print(f"overhead over the fake's first token: p50 {_util.ms(p50)} ms "
          f"(goal <= 20: {_util.verdict(p50 <= 0.020)}), p95 {_util.ms(p95)} ms "
          f"(goal <= 100: {_util.verdict(p95 <= 0.100)})")  # fmt: skip


# ---- driver -----------------------------------------------------------------------------


def _wait_for_file(path: Path, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)


PROFILED_SERVER = """
import cProfile, signal, sys, time
profile = cProfile.Profile(time.thread_time)  # CPU of the event loop's thread, not wall time
def start(*_):
    profile.enable()
def stop(*_):
    profile.disable()
    profile.dump_stats({path!r})
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, stop)
sys.argv = ["corral", *sys.argv[3:]]  # drop the "-m corral" that follows -c
from corral.cli import main
main()
"""
"""A server whose event loop is profiled between SIGUSR1 and SIGUSR2 (idle otherwise)."""


def start_server(
    folder: Path, fake_url: str, env: dict[str, str], profile: Path | None = None
) -> ServerProcess:
    server = ServerProcess(folder, model_url=fake_url, env=env)
    if profile is not None:
        server.python_args = ("-c", PROFILED_SERVER.format(path=str(profile)))
    return server.start()


def print_profile(path: Path, name: str, turns: int, top: int = 20) -> None:
    """Where the event loop's CPU went (the profiler's clock is the thread's CPU time: waits
    for the disk or for a core do not count, the profiler's own cost does)."""
    if not path.exists():
        print(f"\n(no profile of the {name} server)")
        return
    stats = pstats.Stats(str(path))
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    idle = [k for k in table if k[2] == "<method 'poll' of 'select.epoll' objects>"]
    for key in idle:
        del table[key]
    busy = sum(row[2] for row in table.values())
    print(
        f"\nprofile of the {name} server's event loop over {turns} turns "
        f"({busy / turns * 1000:.1f} ms/turn under the profiler, epoll waits left out; "
        f"top {top} by own time):"
    )
    stats.total_tt = busy  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    print(f"{name}: Corral's own functions by cumulative time (coroutines: while running)")
    stats.sort_stats("cumulative").print_stats(r"/corral/", top // 2)


async def main() -> None:
    args = parse_args()
    _util.raise_nofile()
    _util.stop_on_signals()
    folder = _util.disk_tempdir("brain-")
    try:
        with fake_model(args.delay, "ok", folder) as fake_url:
            profiles = {"SQLite": folder / "sqlite.prof", "PostgreSQL": folder / "pg.prof"}
            cpu: dict[str, TurnCpu] = {}
            if not args.only_postgres:
                server = start_server(folder / "sqlite", fake_url, {}, profiles["SQLite"])
                try:
                    if not args.only_cpu:
                        await step_cost(server, args)
                    cpu["SQLite"] = await turns_cpu(server, args.turns, profiles["SQLite"])
                finally:
                    server.stop()
            if not args.skip_postgres:
                with fresh_database(args.admin_url, "corral_bench_brain") as url:
                    env = {"CORRAL_DATABASE_URL": url}
                    pg = start_server(folder / "pg", fake_url, env, profiles["PostgreSQL"])
                    try:
                        cpu["PostgreSQL"] = await turns_cpu(pg, args.turns, profiles["PostgreSQL"])
                    finally:
                        pg.stop()
            print("\n2. server CPU per text-only turn")
            goals = {"SQLite": 0.005, "PostgreSQL": 0.010}
            for name, used in cpu.items():
                ok = _util.verdict(used.total <= goals[name])
                print(f"{name}: {used.describe()} (goal <= {goals[name] * 1000:.0f}: {ok})")
            for name in cpu:
                print_profile(profiles[name], name, args.turns // 2)
                if args.keep_profiles and profiles[name].exists():
                    args.keep_profiles.mkdir(parents=True, exist_ok=True)
                    shutil.copy(profiles[name], args.keep_profiles / profiles[name].name)
            if args.only_postgres or args.only_cpu:
                return
            server = start_server(folder / "sustained", fake_url, {})
            try:
                await sustained(server, args)
            finally:
                server.stop()
    finally:
        _util.remove_tempdir(folder)


if __name__ == "__main__":
    asyncio.run(main())
