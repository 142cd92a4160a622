"""Time to first token through Corral vs the fake model's own latency, at several concurrency
levels, measured side by side in one run (real server subprocess, fake Messages API
subprocess, loopback only).

Usage: uv run python bench/ttft.py [--levels 1,50,200] [--delay 0.2] [--workers N]
Per session: from just before the `events.send` POST to (a) `span.model_request_start`,
(b) the first `event_delta` preview, (c) the first `agent.message`, seen on an SSE stream
opened before the send. Asserts no timings; prints p50/p95 and the overhead over the delay.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

import _util
import anthropic
from _fake import fake_model
from _http import Conn
from tests.server import API_KEY, ServerProcess

from corral.config import Settings

GOAL_P50 = 0.010
GOAL_P95 = 0.050
HEADERS = {"anthropic-beta": "managed-agents-2026-04-01", "x-api-key": API_KEY}
MARKS = {  # SSE event name -> metric key
    "span.model_request_start": "a",
    "event_delta": "b",
    "agent.message": "c",
}
METRICS = (
    ("raw_http", "fake alone, bare HTTP: first text delta", True),
    ("raw_sdk", "fake alone, shared SDK client: first delta", True),
    ("send", "corral: events.send POST answered", False),
    ("a", "corral (a) span.model_request_start", False),
    ("b", "corral (b) first event_delta preview", True),
    ("c", "corral (c) first agent.message", True),
)


# ---- modes (extension point) ------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Mode:
    """What differs between benchmark modes: the agent's tools and the server's setup."""

    name: str
    agent_tools: list[dict[str, Any]] = field(default_factory=list)
    server_env: dict[str, str] = field(default_factory=dict)
    server_args: tuple[str, ...] = ()
    fresh_sessions: bool = False
    """Every round uses new sessions, so each measured turn is a session's first."""


def default_mode() -> Mode:
    """No tools: the brain never needs hands, so TTFT is log + brain + provider only."""
    return Mode(name="no tools")


TOOLSET = [{"type": "agent_toolset_20260401"}]


def lazy_hands_mode() -> Mode:
    """Sessions whose agent has sandbox tools; Corral provisions a sandbox only when a tool
    call needs one (never, in this text-only turn)."""
    return Mode(name="lazy hands", agent_tools=TOOLSET, fresh_sessions=True)


def eager_hands_mode() -> Mode:
    """The coupled design the seeds started from: the sandbox is provisioned before the first
    inference of every new session (`CORRAL_EAGER_SANDBOXES=1`)."""
    return Mode(
        name="eager hands",
        agent_tools=TOOLSET,
        fresh_sessions=True,
        server_env={"CORRAL_EAGER_SANDBOXES": "1"},
    )


# ---- one Corral session under measurement ------------------------------------------------


class Tracked:
    """One session with its own stream and send connections; the reader notes when each
    watched event first arrives in the current round."""

    def __init__(self, session_id: str, port: int) -> None:
        self.session_id = session_id
        self.stream_conn = Conn("127.0.0.1", port, HEADERS)
        self.send_conn = Conn("127.0.0.1", port, HEADERS)
        self.connected = asyncio.Event()
        self.idle = asyncio.Event()
        self.t0 = 0.0
        self.marks: dict[str, float] = {}
        self.errors = 0

    def arm(self) -> None:
        self.marks = {}
        self.idle = asyncio.Event()

    def seen(self, name: str, now: float) -> None:
        key = MARKS.get(name)
        if key is not None:
            self.marks.setdefault(key, now)
        elif name == "session.error":
            self.errors += 1
        elif name == "session.status_idle":
            self.idle.set()

    async def follow(self) -> None:
        """Read the SSE stream until cancelled; only `event:` lines matter."""
        path = f"/v1/sessions/{self.session_id}/events/stream?event_deltas=agent.message"
        await self.stream_conn.open()
        async for line in self.stream_conn.stream_lines("GET", path):
            if line.startswith(b"event: "):
                self.seen(line[7:].strip().decode(), time.perf_counter())
            elif line.startswith(b": connected"):
                self.connected.set()

    async def send(self) -> float:
        """POST one user.message; returns the POST's own latency."""
        body = {
            "events": [{"type": "user.message", "content": [{"type": "text", "text": "hello"}]}]
        }
        self.t0 = time.perf_counter()
        await self.send_conn.request("POST", f"/v1/sessions/{self.session_id}/events", body)
        return time.perf_counter() - self.t0


# ---- measurement ------------------------------------------------------------------------


Samples = dict[str, list[float]]


async def corral_rounds(tracked: list[Tracked], rounds: int, warmup: int, samples: Samples) -> None:
    """All sessions send at once each round; wait for every one to go idle."""
    for number in range(warmup + rounds):
        for t in tracked:
            t.arm()
        sent = await asyncio.gather(*(t.send() for t in tracked))
        await asyncio.wait_for(asyncio.gather(*(t.idle.wait() for t in tracked)), 120)
        if number < warmup:
            continue
        samples["send"].extend(sent)
        for t in tracked:
            for key, at in t.marks.items():
                samples[key].append(at - t.t0)


async def _raw_http_first_delta(port: int) -> float:
    conn = await Conn("127.0.0.1", port, {"x-api-key": "sk-bench"}).open()
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "stream": True,
        "messages": [{"role": "user", "content": "hello"}],
    }
    start = time.perf_counter()
    first = math.nan
    try:
        async for line in conn.stream_lines("POST", "/v1/messages", body):
            if line.startswith(b"event: content_block_delta") and math.isnan(first):
                first = time.perf_counter() - start
            elif line.startswith(b"event: message_stop"):
                break
    finally:
        await conn.close()
    return first


async def _sdk_first_delta(sdk: anthropic.AsyncAnthropic) -> float:
    start = time.perf_counter()
    stream = await sdk.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=64,
        stream=True,
        messages=[{"role": "user", "content": "hello"}],
    )
    first = math.nan
    async with stream:
        async for event in stream:
            if event.type == "content_block_delta" and math.isnan(first):
                first = time.perf_counter() - start
    return first


async def raw_rounds(fake_url: str, level: int, rounds: int, warmup: int, samples: Samples) -> None:
    """The same concurrency straight at the fake: with one shared official SDK client (as
    Corral's provider does) and with bare HTTP connections (the floor)."""
    sdk = anthropic.AsyncAnthropic(base_url=fake_url, api_key="sk-bench", max_retries=0)
    port = int(fake_url.rsplit(":", 1)[1])
    try:
        for number in range(warmup + rounds):
            sdk_firsts = await asyncio.gather(*(_sdk_first_delta(sdk) for _ in range(level)))
            http_firsts = await asyncio.gather(*(_raw_http_first_delta(port) for _ in range(level)))
            if number >= warmup:
                samples["raw_sdk"].extend(sdk_firsts)
                samples["raw_http"].extend(http_firsts)
    finally:
        await sdk.close()


async def corral_level(
    server: ServerProcess,
    agent_id: str,
    env_id: str,
    level: int,
    rounds: int,
    warmup: int,
    samples: Samples,
) -> int:
    """Create `level` sessions, open their streams, run the rounds; returns session errors."""
    sdk = anthropic.AsyncAnthropic(base_url=server.url, api_key=API_KEY, max_retries=2)
    limit = asyncio.Semaphore(20)

    async def create() -> Tracked:
        async with limit:
            session = await sdk.beta.sessions.create(agent=agent_id, environment_id=env_id)
        return Tracked(session.id, server.port)

    tracked = list(await asyncio.gather(*(create() for _ in range(level))))
    await sdk.close()
    readers = [asyncio.create_task(t.follow()) for t in tracked]
    try:
        await asyncio.gather(*(t.send_conn.open() for t in tracked))
        await asyncio.wait_for(asyncio.gather(*(t.connected.wait() for t in tracked)), 60)
        await corral_rounds(tracked, rounds, warmup, samples)
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for t in tracked:
            await t.stream_conn.close()
            await t.send_conn.close()
    return sum(t.errors for t in tracked)


def server_default_workers() -> int:
    """The server's default brain-slot count (`corral serve --workers`)."""
    default = Settings.model_fields["workers"].default
    return default if isinstance(default, int) else 0


def rounds_for(level: int, args: argparse.Namespace) -> int:
    """Enough rounds for at least `--min-samples` samples, and at least `--min-rounds`."""
    if args.rounds:
        return int(args.rounds)
    floor: int = args.min_rounds
    return max(floor, int(math.ceil(args.min_samples / level)))


async def run_levels(
    args: argparse.Namespace, mode: Mode, server: ServerProcess, fake_url: str
) -> dict[int, Samples]:
    """Raw baseline and Corral at each level, back to back."""
    sdk = anthropic.AsyncAnthropic(base_url=server.url, api_key=API_KEY, max_retries=0)
    tools: Any = mode.agent_tools  # wire dicts; the SDK's TypedDict union is not needed here
    agent = await sdk.beta.agents.create(model="claude-sonnet-4-5", name="ttft-bench", tools=tools)
    env = await sdk.beta.environments.create(name="ttft-bench", config={"type": "cloud"})
    await sdk.close()
    results: dict[int, Samples] = {}
    slots = args.workers or server_default_workers()
    for level in args.levels:
        if level > slots:
            print(
                f"  note: {level} sessions > {slots} brain slots: sessions queue for a slot "
                "(see --workers)",
                flush=True,
            )
        rounds = rounds_for(level, args)
        samples: Samples = {key: [] for key, _, _ in METRICS}
        await raw_rounds(fake_url, level, rounds, args.warmup, samples)
        if mode.fresh_sessions:
            errors = 0
            for _ in range(rounds):
                errors += await corral_level(server, agent.id, env.id, level, 1, 0, samples)
        else:
            errors = await corral_level(
                server, agent.id, env.id, level, rounds, args.warmup, samples
            )
        results[level] = samples
        note = f", {errors} session.error events" if errors else ""
        print(f"  level {level}: {rounds} round(s) x {level} session(s){note}", flush=True)
    return results


# ---- report -----------------------------------------------------------------------------


def report(results: dict[int, Samples], delay: float) -> None:
    """p50/p95 per metric and level; overhead subtracts the fake's delay where it applies."""
    rows: list[list[object]] = []
    for level, samples in results.items():
        raw_p50 = _util.percentile(samples["raw_http"], 50)
        for key, label, after_model in METRICS:
            values = samples[key]
            p50, p95 = _util.percentile(values, 50), _util.percentile(values, 95)
            cut = delay if after_model else 0.0
            over = "" if key == "send" else f"{_util.ms(p50 - cut)} / {_util.ms(p95 - cut)}"
            vs_raw = _util.ms(p50 - raw_p50) if after_model and key != "raw_http" else ""
            rows.append(
                [
                    level,
                    label,
                    len(values),
                    _util.ms(p50),
                    _util.ms(p95),
                    _util.ms(max(values, default=math.nan)),
                    over,
                    vs_raw,
                ]
            )
        rows.append([""] * 8)
    print(
        _util.table(
            [
                "sessions",
                "measure",
                "n",
                "p50 ms",
                "p95 ms",
                "max ms",
                "overhead p50/p95 ms",
                "p50 - bare p50 ms",
            ],
            rows[:-1],
        )
    )
    print()
    top = max(results)
    goal_rows = []
    for key, label, after_model in METRICS[3:]:
        values = results[top][key]
        cut = delay if after_model else 0.0
        p50, p95 = _util.percentile(values, 50) - cut, _util.percentile(values, 95) - cut
        goal_rows.append(
            [
                f"{label} @ {top}",
                f"{_util.ms(p50)} / {_util.ms(p95)}",
                f"<= {_util.ms(GOAL_P50)} / {_util.ms(GOAL_P95)}",
                _util.verdict(p50 <= GOAL_P50 and p95 <= GOAL_P95),
            ]
        )
    print(
        _util.table(
            ["goal: Corral overhead p50 / p95 (ms)", "measured", "goal", "check"], goal_rows
        )
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--levels",
        default="1,50,200",
        type=lambda s: [int(x) for x in s.split(",")],
        help="concurrent sessions per level, comma-separated",
    )
    parser.add_argument("--delay", type=float, default=0.2, help="fake first-token delay (s)")
    parser.add_argument("--text", default="Hello from the fake model.", help="fake reply")
    parser.add_argument("--rounds", type=int, default=0, help="rounds per level (0 = auto)")
    parser.add_argument("--min-samples", type=int, default=40, help="auto rounds target")
    parser.add_argument("--min-rounds", type=int, default=2, help="auto rounds floor")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds per level")
    parser.add_argument(
        "--workers", type=int, default=0, help="server brain slots (0 = the server's default)"
    )
    parser.add_argument(
        "--compare-hands",
        action="store_true",
        help="side by side: sessions with sandbox tools, hands lazy vs eager (needs bwrap)",
    )
    return parser.parse_args()


def run_mode(args: argparse.Namespace, mode: Mode) -> dict[int, Samples]:
    """Start a fake model and a fresh server for `mode`, and measure every level."""
    folder = _util.disk_tempdir("corral-bench-ttft-")
    server_args = (*mode.server_args, *(("--workers", str(args.workers)) if args.workers else ()))
    try:
        with fake_model(args.delay, args.text, folder) as fake_url:
            server = ServerProcess(
                folder / "data", model_url=fake_url, env=mode.server_env, args=server_args
            ).start()
            try:
                return asyncio.run(run_levels(args, mode, server, fake_url))
            finally:
                server.stop()
    finally:
        _util.remove_tempdir(folder)


def compare_hands(lazy: dict[int, Samples], eager: dict[int, Samples]) -> None:
    """Time to first agent event, lazy vs eager hands, and the reduction lazy gives."""
    rows: list[list[object]] = []
    for level in lazy:
        for key, label in (("a", "span.model_request_start"), ("c", "first agent.message")):
            lz, eg = lazy[level][key], eager[level][key]
            cells: list[object] = [level, label]
            for pct in (50, 95):
                lp, ep = _util.percentile(lz, pct), _util.percentile(eg, pct)
                cut = (1 - lp / ep) * 100 if ep else math.nan
                cells += [_util.ms(ep), _util.ms(lp), f"{cut:.0f}%"]
            rows.append(cells)
    print(
        _util.table(
            [
                "sessions",
                "time to",
                "eager p50",
                "lazy p50",
                "p50 cut",
                "eager p95",
                "lazy p95",
                "p95 cut",
            ],
            rows,
        )
    )


def main() -> None:
    args = parse_args()
    _util.raise_nofile()
    _util.stop_on_signals()
    modes = [lazy_hands_mode(), eager_hands_mode()] if args.compare_hands else [default_mode()]
    print(
        f"TTFT benchmark: modes={[m.name for m in modes]}, fake first-token delay "
        f"{args.delay * 1000:.0f} ms, levels {args.levels}, "
        f"server workers {args.workers or 'default'}",
        flush=True,
    )
    results = {mode.name: run_mode(args, mode) for mode in modes}
    for name, result in results.items():
        print(f"\n== {name}")
        report(result, args.delay)
    if args.compare_hands:
        print("\n== time to first agent event: hands provisioned eagerly vs lazily")
        compare_hands(results["lazy hands"], results["eager hands"])


if __name__ == "__main__":
    main()
