"""Idle SSE streams one server process holds (RSS per stream) and the time to fan one event
out to all of them, from one client process over loopback.

Usage: uv run python bench/streams.py [--streams 5000] [--rounds 3]
All streams follow one session; each round appends a `session.updated` (sessions.update with
a new title), which wakes no brain. Asserts no timings; prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import time
from dataclasses import dataclass

import _util
from _http import Conn
from tests.server import API_KEY, ServerProcess

GOAL_STREAMS = 5000
GOAL_KIB_PER_STREAM = 16.0
HEADERS = {"anthropic-beta": "managed-agents-2026-04-01", "x-api-key": API_KEY}
CONNECTED = b": connected"
MARKER = b"event: session.updated"


class Fanout:
    """Counts the streams that have seen the current round's event."""

    def __init__(self) -> None:
        self.total = 0
        self.target = 0
        self.reached = 0
        self.done = asyncio.Event()

    def arm(self, target: int, total: int) -> None:
        self.target, self.total, self.reached = target, total, 0
        self.done = asyncio.Event()

    def reach(self) -> None:
        self.reached += 1
        if self.reached >= self.total:
            self.done.set()


class Follower(asyncio.Protocol):
    """One idle SSE stream, as cheap as possible on the client: no task, no line parsing, just
    a scan of the bytes for two markers."""

    def __init__(self, request: bytes, connected: asyncio.Future[None], fanout: Fanout) -> None:
        self.request = request
        self.connected = connected
        self.fanout = fanout
        self.transport: asyncio.Transport | None = None
        self.tail = b""
        self.hit_at = 0.0
        self.hits = 0
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        window = self.tail + data
        if not self.connected.done() and CONNECTED in window:
            self.connected.set_result(None)
        found = window.count(MARKER)
        if found:
            before, self.hits = self.hits, self.hits + found
            if before < self.fanout.target <= self.hits:
                self.hit_at = now
                self.fanout.reach()
        self.tail = window[-len(MARKER) :]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.connected.done():
            self.connected.set_exception(ConnectionError("stream closed before connecting"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Opened:
    """How opening a batch of streams went."""

    count: int
    seconds: float
    rss_kib: int


async def open_streams(
    port: int, session_id: str, count: int, followers: list[Follower], fanout: Fanout, batch: int
) -> float:
    """Open `count` more streams, `batch` connects at a time; returns the seconds it took."""
    loop = asyncio.get_running_loop()
    path = f"/v1/sessions/{session_id}/events/stream"
    head = [
        f"GET {path} HTTP/1.1",
        f"host: 127.0.0.1:{port}",
        "accept: text/event-stream",
        *(f"{k}: {v}" for k, v in HEADERS.items()),
    ]
    request = ("\r\n".join(head) + "\r\n\r\n").encode()
    start = time.perf_counter()
    for first in range(0, count, batch):
        waits = []
        for _ in range(min(batch, count - first)):
            connected: asyncio.Future[None] = loop.create_future()
            follower = Follower(request, connected, fanout)
            await loop.create_connection(lambda f=follower: f, "127.0.0.1", port)  # type: ignore[misc]
            followers.append(follower)
            waits.append(connected)
        await asyncio.wait_for(asyncio.gather(*waits), 120)
    return time.perf_counter() - start


async def settle_rss(pid: int, seconds: float = 1.0) -> int:
    """RSS after the server has had a moment to go quiet."""
    await asyncio.sleep(seconds)
    return _util.rss_kib(pid)


async def fan_out(
    api: Conn, session_id: str, followers: list[Follower], fanout: Fanout, number: int
) -> tuple[float, list[float], int]:
    """Append one event; returns (POST latency, per-stream delivery latencies, missing)."""
    live = [f for f in followers if not f.lost]
    fanout.arm(number, len(live))
    start = time.perf_counter()
    await api.request("POST", f"/v1/sessions/{session_id}", {"title": f"fan-out {number}"})
    posted = time.perf_counter() - start
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(fanout.done.wait(), 120)
    latencies = [f.hit_at - start for f in live if f.hits >= number]
    return posted, latencies, len(followers) - len(latencies)


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """Everything measured in one run."""

    streams: int
    warm: int
    open_seconds: float
    rss_idle: int
    rss_warm: int
    rss_full: int
    rss_after: int
    rounds: list[tuple[float, list[float], int]]
    lost: int

    @property
    def kib_per_stream(self) -> float:
        return (self.rss_full - self.rss_warm) / max(self.streams - self.warm, 1)


async def setup_session(api: Conn) -> str:
    """An agent, an environment and the one session every stream follows."""
    agent = await api.request(
        "POST", "/v1/agents", {"model": "corral-scripted", "name": "streams-bench"}
    )
    env = await api.request(
        "POST", "/v1/environments", {"name": "streams-bench", "config": {"type": "cloud"}}
    )
    session = await api.request(
        "POST", "/v1/sessions", {"agent": agent["id"], "environment_id": env["id"]}
    )
    return str(session["id"])


async def measure(args: argparse.Namespace, server: ServerProcess) -> Outcome:
    assert server.proc is not None
    pid = server.proc.pid
    api = await Conn("127.0.0.1", server.port, HEADERS).open()
    session_id = await setup_session(api)
    followers: list[Follower] = []
    fanout = Fanout()
    rss_idle = await settle_rss(pid)
    warm = min(args.warmup, args.streams - 1)
    open_seconds = await open_streams(server.port, session_id, warm, followers, fanout, args.batch)
    rss_warm = await settle_rss(pid)
    open_seconds += await open_streams(
        server.port, session_id, args.streams - warm, followers, fanout, args.batch
    )
    rss_full = await settle_rss(pid)
    print(f"  {len(followers)} streams open in {open_seconds:.1f} s", flush=True)
    rounds = []
    for number in range(1, args.rounds + 1):
        rounds.append(await fan_out(api, session_id, followers, fanout, number))
        print(f"  round {number}: delivered to {len(rounds[-1][1])}", flush=True)
        await asyncio.sleep(args.pause)
    rss_after = await settle_rss(pid)
    lost = sum(f.lost for f in followers)
    for follower in followers:
        if follower.transport is not None:
            follower.transport.close()
    await api.close()
    return Outcome(
        streams=len(followers),
        warm=warm,
        open_seconds=open_seconds,
        rss_idle=rss_idle,
        rss_warm=rss_warm,
        rss_full=rss_full,
        rss_after=rss_after,
        rounds=rounds,
        lost=lost,
    )


def report(out: Outcome) -> None:
    measured = out.streams - out.warm
    print(
        _util.table(
            ["idle streams", "value"],
            [
                ["streams open (one session)", out.streams],
                ["streams lost before the end", out.lost],
                [
                    "open time / rate",
                    f"{out.open_seconds:.1f} s / {out.streams / out.open_seconds:,.0f} per s",
                ],
                ["server RSS: no streams", f"{out.rss_idle / 1024:.1f} MiB"],
                [f"server RSS: {out.warm} warm-up streams", f"{out.rss_warm / 1024:.1f} MiB"],
                [f"server RSS: {out.streams} streams", f"{out.rss_full / 1024:.1f} MiB"],
                ["server RSS: after the fan-out rounds", f"{out.rss_after / 1024:.1f} MiB"],
                [f"RSS growth per stream (last {measured})", f"{out.kib_per_stream:.1f} KiB"],
            ],
        )
    )
    print()
    rows = []
    for number, (posted, latencies, missing) in enumerate(out.rounds, 1):
        rows.append(
            [
                number,
                len(latencies),
                missing,
                _util.ms(posted),
                _util.ms(_util.percentile(latencies, 50)),
                _util.ms(_util.percentile(latencies, 95)),
                _util.ms(max(latencies, default=float("nan"))),
            ]
        )
    print(
        _util.table(
            [
                "round",
                "delivered",
                "missing",
                "POST ms",
                "p50 ms",
                "p95 ms",
                "max ms = total fan-out",
            ],
            rows,
        )
    )
    print()
    held = out.streams >= GOAL_STREAMS and out.lost == 0
    print(
        _util.table(
            ["goal", "measured", "goal", "check"],
            [
                [
                    "idle streams held",
                    out.streams - out.lost,
                    f">= {GOAL_STREAMS}",
                    _util.verdict(held),
                ],
                [
                    "RSS per stream",
                    f"{out.kib_per_stream:.1f} KiB",
                    f"<= {GOAL_KIB_PER_STREAM:.0f} KiB",
                    _util.verdict(out.kib_per_stream <= GOAL_KIB_PER_STREAM),
                ],
            ],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--streams", type=int, default=5000, help="SSE streams to open")
    parser.add_argument(
        "--warmup",
        type=int,
        default=200,
        help="streams opened before the RSS baseline (one-time allocations)",
    )
    parser.add_argument("--batch", type=int, default=250, help="concurrent connects")
    parser.add_argument("--rounds", type=int, default=3, help="events fanned out")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between rounds")
    args = parser.parse_args()
    _util.stop_on_signals()
    limit = _util.raise_nofile()  # the server inherits it: it is started after this
    if limit < args.streams + 200:
        raise SystemExit(f"open-file limit {limit} is too low for {args.streams} streams")
    folder = _util.disk_tempdir("corral-bench-streams-")
    print(
        f"SSE streams benchmark: {args.streams} streams on one session, "
        f"{args.rounds} fan-out round(s), RLIMIT_NOFILE {limit}",
        flush=True,
    )
    server = ServerProcess(folder / "data").start()
    try:
        gc.freeze()  # the client's many small objects need no collection passes
        outcome = asyncio.run(measure(args, server))
    except BaseException:
        print(server.log_path.read_text()[-3000:])
        raise
    finally:
        server.stop()
        _util.remove_tempdir(folder)
    print()
    report(outcome)


if __name__ == "__main__":
    main()
