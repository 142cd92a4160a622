"""Scale-out benchmark, one run: sessions completed per second and TTFT overhead with 1, 2
and 4 worker processes on PostgreSQL against the embedded SQLite default (same workload),
then event-append throughput and SSE fan-out latency (append -> client) on PostgreSQL.

Usage: uv run python bench/scale.py [--sessions 200] [--workers 1,2,4] [--delay 0.05] [--bash]
       [--admin-url postgresql://postgres@127.0.0.1:5432/test]
Workload per session: one turn of text + custom tool, text + custom tool (or bash with
--bash), final text, all sessions at once. TTFT overhead = client input -> first text delta on
the SSE stream, minus the fake's first-token delay. Asserts no timings; prints tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import _util
from _cluster import DEFAULT_ADMIN_URL, Cluster, child_env, fresh_database
from _scale_fake import scale_fake
from _scale_load import Round, measure
from _scale_store import Appends, Fanout, append_throughput, fanout_latency
from tests.server import ServerProcess

from corral.store.postgres import PostgresStore
from corral.store.sqlite import SqliteStore

GOAL_FANOUT_P95 = 0.020


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """One configuration's measured rounds."""

    name: str
    rounds: list[Round]
    light: list[Round]
    """Rounds of a few sessions: TTFT overhead without queueing."""

    @property
    def rate(self) -> float:
        return sum(r.sessions for r in self.rounds) / sum(r.seconds for r in self.rounds)

    def ttft(self, q: float, delay: float, *, light: bool = False) -> float:
        rounds = self.light if light else self.rounds
        return _util.percentile([t for r in rounds for t in r.ttft], q) - delay


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add = parser.add_argument
    add("--sessions", type=int, default=200, help="sessions per measured round")
    add("--rounds", type=int, default=2, help="measured rounds per configuration")
    add("--warmup", type=int, default=20, help="sessions in the untimed warm-up round")
    add("--light", type=int, default=5, help="sessions per light-load TTFT round (3 rounds)")
    add("--workers", default="1,2,4", type=lambda s: [int(x) for x in s.split(",")])
    add("--apis", type=int, default=1, help="API processes in front of the workers")
    add("--delay", type=float, default=0.05, help="fake first-token delay (s)")
    add("--bash", action="store_true", help="one step runs bash in a sandbox (needs bwrap)")
    add("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL server for fresh databases")
    add("--skip-store", action="store_true", help="skip append throughput and fan-out")
    return parser.parse_args()


@contextlib.contextmanager
def embedded(folder: Path, fake_url: str, database_url: str | None = None) -> Iterator[list[int]]:
    """`corral serve` with its brains in-process (SQLite default, or PostgreSQL)."""
    data = folder / "data"
    args = ("--database-url", database_url) if database_url else ()
    server = ServerProcess(data, model_url=fake_url, env=child_env(data, fake_url, {}), args=args)
    server.log_path = folder / "server.log"
    folder.mkdir(parents=True, exist_ok=True)
    server.start()
    try:
        yield [server.port]
    finally:
        server.stop()


@contextlib.contextmanager
def scaled(folder: Path, fake_url: str, url: str, apis: int, workers: int) -> Iterator[list[int]]:
    """API processes (no brains) plus `workers` worker processes on one database."""
    cluster = Cluster(folder, url, fake_url)
    try:
        cluster.start_apis(apis)
        cluster.start_workers(workers)
        yield [api.port for api in cluster.apis]
    finally:
        cluster.stop()


def run_configs(args: argparse.Namespace, root: Path, fake_url: str) -> list[Result]:
    """Every configuration, one after the other, each on fresh storage."""
    results = []

    def play(name: str, ports: list[int]) -> None:
        rounds = asyncio.run(measure(ports, args.sessions, args.warmup, args.rounds))
        light = asyncio.run(measure(ports, args.light, 0, 3))
        results.append(Result(name=name, rounds=rounds, light=light))
        r = results[-1]
        print(f"  {name}: {r.rate:.1f} sessions/s", flush=True)

    with embedded(root / "sqlite", fake_url) as ports:
        play("sqlite, embedded (serve)", ports)
    with (
        fresh_database(args.admin_url, "corral_scale") as url,
        embedded(root / "pg-embedded", fake_url, url) as ports,
    ):
        play("postgres, embedded (serve)", ports)
    for n in args.workers:
        with (
            fresh_database(args.admin_url, "corral_scale") as url,
            scaled(root / f"pg-{n}", fake_url, url, args.apis, n) as ports,
        ):
            play(f"postgres, {args.apis} API + {n} worker{'s' if n > 1 else ''}", ports)
    return results


async def store_numbers(
    args: argparse.Namespace, root: Path, fake_url: str
) -> tuple[list[Appends], Fanout]:
    """Append throughput on both stores; fan-out from this process to 2 API processes."""
    appends: list[Appends] = []
    sqlite = SqliteStore(root / "append.db")
    await sqlite.open()
    try:
        appends += await append_throughput(sqlite, "sqlite", total=4000, sessions=64)
    finally:
        await sqlite.aclose()
    with fresh_database(args.admin_url, "corral_scale") as url:
        pg = PostgresStore(url)
        await pg.open()
        try:
            appends += await append_throughput(pg, "postgres", total=4000, sessions=64)
        finally:
            await pg.aclose()
    with fresh_database(args.admin_url, "corral_scale") as url:
        cluster = Cluster(root / "fanout", url, fake_url)
        store = PostgresStore(url)
        try:
            await asyncio.to_thread(cluster.start_apis, 2)
            await store.open()
            ports = [a.port for a in cluster.apis]
            fan = await fanout_latency(store, ports, sessions=50, appends=2000, rate=200.0)
        finally:
            await store.aclose()
            await asyncio.to_thread(cluster.stop)
    return appends, fan


def _p50_p95(r: Result, delay: float, *, light: bool) -> str:
    return (
        f"{_util.ms(r.ttft(50, delay, light=light))} / {_util.ms(r.ttft(95, delay, light=light))}"
    )


def report(results: list[Result], delay: float) -> None:
    """Throughput, TTFT overhead and the scaling ratios."""
    rows = [
        [
            r.name,
            sum(x.sessions for x in r.rounds),
            f"{r.rate:.1f}",
            _p50_p95(r, delay, light=True),
            _p50_p95(r, delay, light=False),
            f"{100 * sum(x.busy for x in r.rounds) / len(r.rounds):.0f}%",
            sum(x.errors for x in r.rounds),
        ]
        for r in results
    ]
    headers = ["configuration", "sessions", "sessions/s", "TTFT overhead light p50/p95 ms",
               "TTFT overhead loaded p50/p95 ms", "CPU busy", "errors"]  # fmt: skip
    print(_util.table(headers, rows))
    print()
    roles = ["api/serve", "workers", "postgres", "fake model", "load client", "sandboxes"]
    rows = []
    for r in results:
        sessions = sum(x.sessions for x in r.rounds)
        used = [sum(x.cpu.get(role, 0.0) for x in r.rounds) for role in roles]
        rows.append([r.name, *(f"{1000 * u / sessions:.1f}" for u in used)])
    print(_util.table(["CPU ms per session", *roles], rows))
    by = {r.name: r for r in results}
    workers = [r for r in results if "worker" in r.name]
    base = by.get("sqlite, embedded (serve)")
    print()
    for r in workers:
        ratio = r.rate / workers[0].rate if workers else math.nan
        vs = r.rate / base.rate if base else math.nan
        print(f"  {r.name}: x{ratio:.2f} vs 1 worker, x{vs:.2f} vs SQLite embedded")


def report_store(appends: list[Appends], fan: Fanout) -> None:
    """Append throughput and fan-out latency tables."""
    rows = [[a.name, a.events, f"{a.seconds:.2f}", f"{a.rate:,.0f}"] for a in appends]
    print(_util.table(["event appends", "events", "seconds", "events/s"], rows))
    print()
    rows = []
    for label, values in (("append call -> SSE client", fan.from_call),
                          ("append committed -> SSE client", fan.from_commit)):  # fmt: skip
        p95 = _util.percentile(values, 95)
        rows.append([label, len(values), _util.ms(_util.percentile(values, 50)), _util.ms(p95),
                     _util.ms(max(values, default=math.nan))])  # fmt: skip
    title = "fan-out (PostgreSQL, 200 appends/s, 2 API processes x 50 streams)"
    print(_util.table([title, "n", "p50 ms", "p95 ms",
                       "max ms"], rows))  # fmt: skip
    p95 = _util.percentile(fan.from_call, 95)
    print(f"  missing deliveries: {fan.missing}; goal p95 <= {_util.ms(GOAL_FANOUT_P95)} ms: "
          f"{_util.verdict(p95 <= GOAL_FANOUT_P95)}")  # fmt: skip


def main() -> None:
    args = parse_args()
    _util.raise_nofile()
    _util.stop_on_signals()
    root = _util.disk_tempdir("corral-bench-scale-")
    print(f"scale benchmark: {args.sessions} sessions x {args.rounds} rounds per configuration, "
          f"fake first-token delay {args.delay * 1000:.0f} ms, workers {args.workers}, "
          f"bash {'on' if args.bash else 'off'}", flush=True)  # fmt: skip
    try:
        with scale_fake(args.delay, args.bash, root) as fake_url:
            results = run_configs(args, root, fake_url)
            store = None if args.skip_store else asyncio.run(store_numbers(args, root, fake_url))
    finally:
        _util.remove_tempdir(root)
    print()
    report(results, args.delay)
    if store is not None:
        print()
        report_store(*store)


if __name__ == "__main__":
    main()
