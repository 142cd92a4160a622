"""Durable append throughput of the SQLite event log (WAL, synchronous=FULL) against a bare
sqlite3 loop on the same schema and PRAGMAs, measured side by side in one run.

The bare loops are what a minimal store must do per event, no more: INSERT the event (the
store's own schema, built by its migrations, so every index is there; the body as the same
compact JSON the store writes, so both fsync the same bytes) and UPDATE the session's
`last_seq` and `updated_at` (API-visible: every append moves it), in one transaction per commit,
on a connection opened like the store's (`sqlite_db.connect`; the bare loop keeps SQLite's
automatic checkpoints inside its commits, where the store checkpoints every 250 commits on its
writer thread, waiting for it as for any write). They keep no projection: the store's other
session columns (status, usage, stats) and its tool-call rows do not change for these events.
The concurrent bare loop commits every `--sessions` events round-robin over `--sessions`
sessions: the best a group commit can do when each session has one append in flight.

Usage: uv run python bench/log.py [--seq 3000] [--sessions 100] [--per-session 200] [--repeat 5]
Writes only to a temp dir on the repo's filesystem (so fsync is real); asserts no timings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _util
import anyio

from corral.ids import new_id, now_rfc3339
from corral.store.base import SessionRow
from corral.store.sqlite import SqliteStore
from corral.store.sqlite_db import SqliteDatabase, connect, schema_version

GOAL_SEQUENTIAL = 5_000.0
GOAL_CONCURRENT = 50_000.0
GOAL_RATIO = 0.9


@dataclass(frozen=True, slots=True, kw_only=True)
class Result:
    """One measured configuration."""

    name: str
    events: int
    seconds: float
    commits: int

    @property
    def rate(self) -> float:
        return self.events / self.seconds

    @property
    def per_commit(self) -> float:
        return self.events / max(self.commits, 1)


def event_bodies(count: int, size: int) -> list[dict[str, Any]]:
    """`agent.message`-shaped events with about `size` bytes of text, made before timing
    (ids and payloads are the caller's cost, not the log's)."""
    text = ("lorem ipsum " * (size // 12 + 1))[:size]
    return [
        {"id": new_id("sevt"), "type": "agent.message", "content": [{"type": "text", "text": text}]}
        for _ in range(count)
    ]


# ---- bare sqlite3 reference loops ------------------------------------------------------

_BARE_INSERT = (
    "INSERT INTO events (session_id, seq, id, type, created_at, body) VALUES (?,?,?,?,?,?)"
)
_BARE_BUMP = "UPDATE sessions SET last_seq = ?, updated_at = ? WHERE id = ?"
_bare_encode = json.JSONEncoder(separators=(",", ":")).encode  # the store's stored form


def _bare_db(path: Path, sessions: int) -> list[str]:
    """The store's schema (its own migrations) with `sessions` session rows; their ids."""
    schema_version(path)
    ids = [f"sesn_bare{n:04d}" for n in range(sessions)]
    conn = connect(path)
    conn.executemany(
        "INSERT INTO sessions (id, created_at, environment_id, agent_id, agent_version, status, "
        "body, usage, stats) VALUES (?, ?, 'env_bench', 'agent_bench', 1, 'idle', '{}', '{}', "
        "'{}')",
        [(key, now_rfc3339()) for key in ids],
    )
    conn.close()
    return ids


def bare_loop(path: Path, total: int, batch: int, size: int, sessions: int = 1) -> Result:
    """`total` events, committing every `batch` of them; events go round-robin to `sessions`
    sessions (1 = append-only; more = the store's concurrent key pattern)."""
    ids = _bare_db(path, sessions)
    conn = connect(path)
    bodies = event_bodies(total, size)
    commits = 0
    start = time.perf_counter()
    for first in range(0, total, batch):
        conn.execute("BEGIN IMMEDIATE")
        now = now_rfc3339()  # once per transaction, as the store does per append
        for n in range(first, min(first + batch, total)):
            body = bodies[n]
            body["processed_at"] = now  # the store stamps every event it logs
            key, seq = ids[n % sessions], n // sessions + 1
            text = _bare_encode(body)
            conn.execute(_BARE_INSERT, (key, seq, body["id"], body["type"], now, text))
            conn.execute(_BARE_BUMP, (seq, now, key))
        conn.execute("COMMIT")
        commits += 1
    elapsed = time.perf_counter() - start
    conn.close()
    spread = "" if sessions == 1 else f", over {sessions} sessions"
    return Result(
        name=f"bare sqlite3, {batch} event(s)/commit{spread}",
        events=total,
        seconds=elapsed,
        commits=commits,
    )


async def hopped_loop(path: Path, sessions: int, per_session: int, size: int) -> Result:
    """The bare loop's statements for each event, run as one `SqliteDatabase.write` each from
    `sessions` tasks (as `store_sequential` / `store_concurrent` call `append`): the store's
    batching, commit path and group commit without the store's own logic. Not a goal: it
    splits the gap to the bare loop into what the async plumbing costs and what the store adds."""
    ids = _bare_db(path, sessions)
    db = SqliteDatabase(path)
    db.open()
    bodies = event_bodies(sessions * per_session, size)

    def op(key: str, seq: int, body: dict[str, Any]) -> Callable[[sqlite3.Connection], None]:
        def run(conn: sqlite3.Connection) -> None:
            now = now_rfc3339()  # per event, not per transaction: slightly more than bare
            body["processed_at"] = now
            text = _bare_encode(body)
            conn.execute(_BARE_INSERT, (key, seq, body["id"], body["type"], now, text))
            conn.execute(_BARE_BUMP, (seq, now, key))

        return run

    async def writer(index: int) -> None:
        for seq in range(1, per_session + 1):
            await db.write(op(ids[index], seq, bodies[index * per_session + seq - 1]))

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index in range(sessions):
            tg.start_soon(writer, index)
    elapsed = time.perf_counter() - start
    commits = db.commits
    await db.aclose()
    spread = "1 session sequential" if sessions == 1 else f"{sessions} sessions concurrent"
    return Result(
        name=f"bare statements via SqliteDatabase.write, {spread}",
        events=sessions * per_session,
        seconds=elapsed,
        commits=commits,
    )


# ---- the real store ---------------------------------------------------------------------


async def _new_store(path: Path, sessions: int) -> tuple[SqliteStore, list[str]]:
    store = SqliteStore(path)
    await store.open()
    ids = [new_id("sesn") for _ in range(sessions)]
    for session_id in ids:
        row = SessionRow(
            id=session_id,
            created_at=now_rfc3339(),
            environment_id="env_bench",
            agent_id="agent_bench",
            agent_version=1,
            body={"title": "bench"},
        )
        await store.create_session(row, [])
    return store, ids


async def store_sequential(path: Path, total: int, size: int) -> Result:
    """One session, one event per `append`, each awaited before the next."""
    store, (session_id,) = await _new_store(path, 1)
    bodies = event_bodies(total, size)
    commits_before = store.db.commits
    start = time.perf_counter()
    for body in bodies:
        await store.append(session_id, [body])
    elapsed = time.perf_counter() - start
    commits = store.db.commits - commits_before
    await store.aclose()
    return Result(
        name="SqliteStore.append, 1 session sequential",
        events=total,
        seconds=elapsed,
        commits=commits,
    )


async def store_concurrent(path: Path, sessions: int, per_session: int, size: int) -> Result:
    """`sessions` tasks, each appending `per_session` single events to its own session."""
    store, ids = await _new_store(path, sessions)
    bodies = event_bodies(sessions * per_session, size)
    commits_before = store.db.commits

    async def writer(index: int, session_id: str) -> None:
        for body in bodies[index * per_session : (index + 1) * per_session]:
            await store.append(session_id, [body])

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for index, session_id in enumerate(ids):
            tg.start_soon(writer, index, session_id)
    elapsed = time.perf_counter() - start
    commits = store.db.commits - commits_before
    await store.aclose()
    return Result(
        name=f"SqliteStore.append, {sessions} sessions concurrent",
        events=sessions * per_session,
        seconds=elapsed,
        commits=commits,
    )


# ---- report -----------------------------------------------------------------------------


def _median(results: list[Result]) -> Result:
    return sorted(results, key=lambda r: r.rate)[len(results) // 2]


def _paired_ratio(runs: dict[str, list[Result]], top: str, bottom: str) -> float:
    """Median over rounds of the ratio within each round, so drift between rounds cancels."""
    ratios = sorted(a.rate / b.rate for a, b in zip(runs[top], runs[bottom], strict=True))
    return ratios[len(ratios) // 2]


def report(runs: dict[str, list[Result]], sessions: int) -> None:
    """Median of the repeats per configuration, with the spread, then the ratios."""
    med = {key: _median(results) for key, results in runs.items()}
    rows = []
    for key, r in med.items():
        rates = sorted(x.rate for x in runs[key])
        rows.append(
            [
                r.name,
                r.events,
                r.commits,
                f"{r.per_commit:.1f}",
                f"{r.seconds:.2f}",
                f"{r.rate:,.0f}",
                f"{rates[0]:,.0f}..{rates[-1]:,.0f}",
            ]
        )
    print(
        _util.table(
            [
                "configuration",
                "events",
                "commits",
                "ev/commit",
                "seconds",
                "events/s (median)",
                "min..max",
            ],
            rows,
        )
    )
    seq, conc = med["seq"], med["concurrent"]
    print()
    rows = [
        _ratio_row(runs, "store sequential / bare single commits", "seq", "bare1"),
        _ratio_row(
            runs,
            f"store concurrent / bare batches of {sessions} over {sessions} sessions",
            "concurrent",
            "bare_batched",
        ),
        [  # not a goal: the async plumbing's share of the gap (see `hopped_loop`)
            "bare via SqliteDatabase.write / bare, sequential",
            f"{_paired_ratio(runs, 'hop_seq', 'bare1'):.2f}x",
            "",
            "",
        ],
        [
            f"bare via SqliteDatabase.write / bare, {sessions} sessions",
            f"{_paired_ratio(runs, 'hop_concurrent', 'bare_batched'):.2f}x",
            "",
            "",
        ],
        [  # not a goal: how much group commit buys over one fsync per append
            "store concurrent / store sequential",
            f"{_paired_ratio(runs, 'concurrent', 'seq'):.2f}x",
            "",
            "",
        ],
        [
            "store sequential events/s",
            f"{seq.rate:,.0f}",
            f">= {GOAL_SEQUENTIAL:,.0f}",
            _util.verdict(seq.rate >= GOAL_SEQUENTIAL),
        ],
        [
            "store concurrent events/s",
            f"{conc.rate:,.0f}",
            f">= {GOAL_CONCURRENT:,.0f}",
            _util.verdict(conc.rate >= GOAL_CONCURRENT),
        ],
    ]
    print(
        _util.table(["ratio (median of per-round ratios) / goal", "value", "goal", "check"], rows)
    )


def _ratio_row(runs: dict[str, list[Result]], label: str, top: str, bottom: str) -> list[object]:
    ratio = _paired_ratio(runs, top, bottom)
    return [label, f"{ratio:.2f}x", f">= {GOAL_RATIO}x", _util.verdict(ratio >= GOAL_RATIO)]


def run(args: argparse.Namespace, folder: Path) -> dict[str, list[Result]]:
    """Interleave bare and store runs, each on a fresh file, so drift hits both alike."""
    size, sessions = args.body_bytes, args.sessions
    total = sessions * args.per_session
    steps: list[tuple[str, Callable[[Path], Result]]] = [
        ("bare1", lambda p: bare_loop(p, args.bare_single, 1, size)),
        ("seq", lambda p: asyncio.run(store_sequential(p, args.seq, size))),
        ("bare_batched", lambda p: bare_loop(p, total, sessions, size, sessions)),
        (
            "concurrent",
            lambda p: asyncio.run(store_concurrent(p, sessions, args.per_session, size)),
        ),
        ("hop_seq", lambda p: asyncio.run(hopped_loop(p, 1, args.seq, size))),
        (
            "hop_concurrent",
            lambda p: asyncio.run(hopped_loop(p, sessions, args.per_session, size)),
        ),
    ]
    runs: dict[str, list[Result]] = {key: [] for key, _ in steps}
    bare_loop(folder / "warmup.db", 300, 1, size)  # the first fsyncs on a new dir are slow
    for attempt in range(args.repeat):
        for key, step in steps:
            result = step(folder / f"{key}-{attempt}.db")
            runs[key].append(result)
            print(f"  round {attempt + 1}: {result.name}: {result.rate:,.0f} events/s", flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seq", type=int, default=3000, help="sequential single appends")
    parser.add_argument("--sessions", type=int, default=100, help="concurrent sessions/tasks")
    parser.add_argument("--per-session", type=int, default=200, help="appends per session")
    parser.add_argument("--bare-single", type=int, default=3000, help="bare single commits")
    parser.add_argument("--body-bytes", type=int, default=300, help="text bytes per event")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the median is reported")
    args = parser.parse_args()
    folder = _util.disk_tempdir("corral-bench-log-")
    print(f"SQLite log benchmark (WAL, synchronous=FULL) in {folder}", flush=True)
    try:
        runs = run(args, folder)
    finally:
        _util.remove_tempdir(folder)
    print()
    report(runs, args.sessions)


if __name__ == "__main__":
    main()
