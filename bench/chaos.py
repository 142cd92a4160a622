"""Chaos run: 2 API processes and 3 workers on one PostgreSQL and one data dir, many sessions
playing multi-step turns (text, bash, custom tools) while a random worker is SIGKILLed about
every second and restarted, and now and then SIGSTOPped past its lease and resumed.

Usage: uv run python bench/chaos.py [--sessions 200] [--kills 1000] [--pauses N] [--no-fencing]
       [--database-url URL | --admin-url URL] [--json FILE] [--keep]
By default it creates and drops a fresh database `corral_chaos_<hex>` on --admin-url's server.
Prints a tally; exits 1 on any violation or unfinished session. `--no-fencing` starts the
workers with fencing patched out by the harness (`_cluster.UNFENCED_PATCH`; no setting in
Corral turns it off), and the same checks must then report violations.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import random
import secrets
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import _util
import anthropic
import httpx
import psycopg
from _chaos_check import Tally, check_all, live_interleavings, scan_worker_logs
from _chaos_client import Control, Record, SessionDriver
from _chaos_model import TOOLS, ChaosModel
from _cluster import DEFAULT_ADMIN_URL, Cluster, fresh_database, write_config
from tests.fakes.messages_server import FakeModelServer
from tests.server import API_KEY


@dataclass(slots=True)
class Chaos:
    """What the monkey did."""

    kills: int = 0
    restarts: int = 0
    pauses: int = 0
    live_interleavings: int = 0
    """Epoch check run after each pause (stale appends landed so far)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add = parser.add_argument
    add("--sessions", type=int, default=200, help="concurrent sessions")
    add("--kills", type=int, default=1000, help="worker SIGKILLs (each followed by a restart)")
    add("--pauses", type=int, default=-1, help="SIGSTOP pauses past the lease (-1: kills/40+1)")
    add("--apis", type=int, default=2, help="API processes (never killed)")
    add("--workers", type=int, default=3, help="worker processes")
    add("--kill-interval", type=float, default=1.0, help="mean seconds between kills")
    add("--min-age", type=float, default=3.0, help="never kill a worker younger than this (s)")
    add("--lease", type=float, default=10.0, help="lease seconds (production default 10)")
    add("--deadline", type=float, default=180.0, help="seconds to finish after the last kill")
    add("--no-fencing", action="store_true", help="workers run with fencing off (must fail)")
    add("--database-url", help="use this existing database instead of a fresh one")
    add("--admin-url", default=DEFAULT_ADMIN_URL, help="server on which to create the fresh db")
    add("--seed", type=int, default=None, help="random seed")
    add("--json", type=Path, help="also write the tally as JSON here")
    add("--keep", action="store_true", help="keep the data dir and logs")
    args = parser.parse_args(argv)
    if args.pauses < 0:
        args.pauses = args.kills // 40 + 1
    if args.seed is None:
        args.seed = secrets.randbelow(1 << 30)
    return args


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[str]:
    """The given database, or a fresh one dropped afterwards."""
    if args.database_url:
        yield args.database_url
    else:
        with fresh_database(args.admin_url, "corral_chaos") as url:
            yield url


# ---- the monkey ------------------------------------------------------------------------------


def leases_by_pid(database_url: str) -> dict[int, int]:
    """Live leases per worker pid (owner names are host:pid:suffix)."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT owner, count(*) FROM session_work WHERE owner IS NOT NULL "
            "AND lease_expires > clock_timestamp() GROUP BY owner"
        ).fetchall()
    out: dict[int, int] = {}
    for owner, count in rows:
        with contextlib.suppress(ValueError, IndexError):
            out[int(str(owner).split(":")[1])] = int(count)
    return out


class Monkey:
    """Kills a random (old enough, running) worker about every second and restarts it;
    now and then SIGSTOPs the worker holding most leases past the lease, then SIGCONTs it."""

    def __init__(
        self, cluster: Cluster, args: argparse.Namespace, chaos: Chaos, rng: random.Random
    ) -> None:
        self.cluster, self.args, self.chaos, self.rng = cluster, args, chaos, rng
        self.every = args.kills / args.pauses if args.pauses else float("inf")
        self.resumes: list[asyncio.Task[None]] = []

    async def run(self) -> None:
        """Until the kill budget is spent and the planned pauses happened."""
        chaos, args = self.chaos, self.args
        give_up = float("inf")  # pauses need a worker holding leases; do not wait forever
        while chaos.kills < args.kills or (self._pauses_left() and time.monotonic() < give_up):
            await asyncio.sleep(self.rng.uniform(0.6, 1.4) * args.kill_interval)
            if chaos.kills >= args.kills:
                give_up = min(give_up, time.monotonic() + 60)
            if self._pause_due() and await self._pause_busiest():
                continue
            if chaos.kills < args.kills:
                self._kill_one()
        await asyncio.gather(*self.resumes)  # let the last pause play out

    def _pauses_left(self) -> bool:
        # Without fencing one provoked interleaving proves the point; stop pausing then.
        provoked = self.args.no_fencing and self.chaos.live_interleavings > 0
        return self.chaos.pauses < self.args.pauses and not provoked

    def _pause_due(self) -> bool:
        when = min((self.chaos.pauses + 0.5) * self.every, self.args.kills)
        idle = not any(w.paused for w in self.cluster.workers)
        return self._pauses_left() and self.chaos.kills >= when and idle

    def _kill_one(self) -> None:
        workers = self.cluster.workers
        candidates = [w for w in workers if not w.paused and w.age() >= self.args.min_age]
        if not candidates:
            return
        worker = self.rng.choice(candidates)
        worker.kill()
        self.chaos.kills += 1
        worker.start()
        self.chaos.restarts += 1
        if self.chaos.kills % 50 == 0:
            print(f"  {self.chaos.kills} kills, {self.chaos.pauses} pauses", flush=True)

    async def _pause_busiest(self) -> bool:
        url = self.cluster.database_url
        leases = await asyncio.to_thread(leases_by_pid, url)
        live = [w for w in self.cluster.workers if not w.paused and w.pid in leases]
        if not live:
            return False
        target = max(live, key=lambda w: leases.get(w.pid or 0, 0))
        pid, seconds = target.pid, self.args.lease + self.rng.uniform(1.0, 4.0)
        target.pause()
        self.chaos.pauses += 1
        print(f"  pause worker {target.index} ({leases[pid or 0]} leases) for {seconds:.1f}s")

        async def resume_later() -> None:
            await asyncio.sleep(seconds)
            if target.pid == pid:
                target.resume()
            await asyncio.sleep(1.0)  # the resumed brain's stale appends, if any
            self.chaos.live_interleavings = await asyncio.to_thread(live_interleavings, url)
            print(f"  resumed; interleaved appends so far: {self.chaos.live_interleavings}")

        self.resumes.append(asyncio.create_task(resume_later()))
        return True


# ---- the run ---------------------------------------------------------------------------------


async def create_sessions(
    sdks: list[anthropic.AsyncAnthropic], count: int, rng: random.Random
) -> list[Record]:
    """One agent (bash toolset + custom `lookup`), one environment, `count` sessions."""
    tools: list[dict[str, object]] = TOOLS
    agent = await sdks[0].beta.agents.create(
        model="claude-sonnet-4-5",
        name="chaos",
        tools=tools,  # type: ignore[arg-type]
    )
    env = await sdks[0].beta.environments.create(name="chaos", config={"type": "cloud"})
    limit = asyncio.Semaphore(16)

    async def one(index: int) -> Record:
        async with limit:
            sdk = sdks[index % len(sdks)]
            session = await sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
        marker = f"chx{index:04d}{secrets.token_hex(3)}"
        return Record(session_id=session.id, marker=marker, stream_api=rng.randrange(len(sdks)))

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def list_all(
    sdks: list[anthropic.AsyncAnthropic], records: list[Record]
) -> dict[str, list[str]]:
    """Every session's log as clients page through it with events.list (SDK)."""
    out: dict[str, list[str]] = {}
    limit = asyncio.Semaphore(8)

    async def one(index: int, record: Record) -> None:
        async with limit:
            sdk = sdks[index % len(sdks)]
            page = sdk.beta.sessions.events.list(record.session_id, limit=500)
            out[record.session_id] = [e.id async for e in page]

    await asyncio.gather(*(one(i, r) for i, r in enumerate(records)))
    return out


async def settle_streams(database_url: str, records: list[Record], seconds: float = 10.0) -> None:
    """Give streams a moment to deliver the last appends (workers are stopped by now)."""
    with psycopg.connect(database_url) as conn:
        last = dict(
            conn.execute(
                "SELECT DISTINCT ON (session_id) session_id, id FROM events "
                "ORDER BY session_id, seq DESC"
            ).fetchall()
        )
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(r.stream_ids and r.stream_ids[-1] == last.get(r.session_id) for r in records):
            return
        await asyncio.sleep(0.1)


async def play(cluster: Cluster, args: argparse.Namespace, chaos: Chaos, tally: Tally) -> None:
    """Sessions, drivers and monkey; then stop the workers and check everything."""
    rng = random.Random(args.seed)
    sdks = [
        anthropic.AsyncAnthropic(base_url=api.url, api_key=API_KEY, max_retries=0, timeout=120)
        for api in cluster.apis
    ]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    http = httpx.AsyncClient(limits=limits, timeout=None)
    records = await create_sessions(sdks, args.sessions, rng)
    control = Control()
    drivers = [
        SessionDriver(r, cluster.apis[r.stream_api].url, http, sdks, control, random.Random(i))
        for i, r in enumerate(records)
    ]
    print(f"  {len(records)} sessions created; chaos starts", flush=True)
    runs = [asyncio.create_task(d.run()) for d in drivers]
    try:
        await Monkey(cluster, args, chaos, rng).run()
        control.more_turns = False
        control.deadline = time.monotonic() + args.deadline
        print(f"  kills done ({chaos.kills}); waiting for sessions to finish", flush=True)
        await asyncio.gather(*runs)
        cluster.stop_workers()
        await settle_streams(cluster.database_url, records)
        api_lists = await list_all(sdks, records)
    finally:
        for driver in drivers:
            await driver.close()
        await http.aclose()
        for sdk in sdks:
            await sdk.close()
    check_all(tally, cluster.database_url, cluster.data_dir, records, api_lists)
    scan_worker_logs(tally, cluster.worker_logs())
    if tally.brain_errors:
        tally.violate("brain_error_logged", f"{tally.brain_errors} in worker logs")
    tally.sessions = len(records)


def report(args: argparse.Namespace, chaos: Chaos, tally: Tally, wall: float) -> None:
    """The tally table and the violations by kind (a few examples each)."""
    rows: list[list[object]] = [
        ["mode", "fencing OFF (must fail)" if args.no_fencing else "fencing on"],
        ["sessions / turns", f"{tally.sessions} / {tally.turns}"],
        ["kills / restarts / pauses", f"{chaos.kills} / {chaos.restarts} / {chaos.pauses}"],
        ["events in logs", tally.events],
        ["bash tool uses / executions", f"{tally.bash_uses} / {tally.bash_executions}"],
        ["custom tool uses", tally.custom_uses],
        [
            "interrupted tool uses (ran before the kill)",
            f"{tally.interrupted} ({tally.interrupted_but_ran})",
        ],
        ["sandbox error results", tally.sandbox_errors],
        ["fencing rejections (append LeaseLost)", tally.append_rejections],
        ["  LeaseLost logged as 'brain crashed'", tally.lease_lost_logged_as_crash],
        ["heartbeat lease losses", tally.heartbeat_losses],
        ["violations", tally.violation_count],
        ["wall time", f"{wall:.0f} s"],
    ]
    rows += [
        [f"  violation: {kind}", len(items)] for kind, items in sorted(tally.violations.items())
    ]
    print()
    print(_util.table(["chaos tally", "value"], rows))
    for kind, items in sorted(tally.violations.items()):
        print(f"\n{kind}:")
        for item in items[:5]:
            print(f"  {item}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _util.raise_nofile()
    _util.stop_on_signals()
    # A killed worker drops its model request half-sent; the fake's ClientDisconnect
    # tracebacks are expected noise here.
    logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
    root = _util.disk_tempdir("corral-chaos-")
    write_config(root / "data", lease_seconds=args.lease, sandbox_idle_seconds=30.0)
    model = ChaosModel(seed=args.seed)
    chaos, tally = Chaos(), Tally()
    print(
        f"chaos: {args.sessions} sessions, {args.kills} kills, {args.pauses} pauses, "
        f"{args.apis} APIs, {args.workers} workers, lease {args.lease}s, seed {args.seed}, "
        f"fencing {'OFF' if args.no_fencing else 'on'}; dir {root}",
        flush=True,
    )
    start = time.monotonic()
    try:
        with FakeModelServer(model) as fake, database(args) as url:
            cluster = Cluster(root, url, fake.url, fencing=not args.no_fencing)
            try:
                cluster.start_apis(args.apis)
                cluster.start_workers(args.workers)
                asyncio.run(play(cluster, args, chaos, tally))
            finally:
                cluster.stop()
    finally:
        if not args.keep:
            _util.remove_tempdir(root)
    wall = time.monotonic() - start
    report(args, chaos, tally, wall)
    if args.json:
        args.json.write_text(json.dumps({**asdict(chaos), **asdict(tally), "wall": wall}))
    ok = tally.violation_count == 0
    print(f"\nRESULT: {'PASS' if ok else 'FAIL'} ({tally.violation_count} violations)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
