"""Benchmark LocalHands: provision latency, `bash true` round trip, sandboxes/s at concurrency 2.

Run with `uv run python bench/provision.py [--runs N]`. A bare `bwrap ... true` spawn is timed
side by side in the same run so the ratios hold on any machine; nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from corral.hands.base import SandboxRecipe
from corral.hands.local import LocalHands

BARE_BWRAP = [
    "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
    "--uid", "1000", "--gid", "1000", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
    "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
    "--dev", "/dev", "--clearenv", "true",
]  # fmt: skip


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def timed(runs: int, step: Callable[[], Awaitable[None]]) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await step()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def bare_bwrap(bwrap: str) -> None:
    proc = await asyncio.create_subprocess_exec(bwrap, *BARE_BWRAP)
    await proc.wait()


async def main(runs: int) -> None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SystemExit("bubblewrap is not installed (Debian package `bubblewrap`)")
    root = Path(tempfile.mkdtemp(prefix="corral-bench-"))
    hands = LocalHands(root / "state")
    recipe = SandboxRecipe(session_id="bench", workspace=root / "ws", outputs=root / "out")
    try:
        warm = await hands.provision(recipe)  # builds /etc and the agent once
        await warm.destroy()

        prov = []
        for _ in range(runs):  # each sandbox is destroyed (untimed) before the next one starts
            start = time.perf_counter()
            sandbox = await hands.provision(recipe)
            prov.append((time.perf_counter() - start) * 1000)
            await sandbox.destroy()

        sandbox = await hands.provision(recipe)

        async def bash_true() -> None:
            await sandbox.execute("bash", {"command": "true"})

        await timed(20, bash_true)
        rtt = await timed(runs, bash_true)
        await sandbox.destroy()
        bare = await timed(runs, lambda: bare_bwrap(bwrap))
        rate = await throughput(hands, recipe, total=max(runs // 2, 20))
    finally:
        await hands.aclose()
        shutil.rmtree(root, ignore_errors=True)
    report(hands.enforcement, runs, prov, rtt, bare, rate)


async def throughput(hands: LocalHands, recipe: SandboxRecipe, *, total: int) -> float:
    """Sandboxes/s (provision + `bash true` + destroy) with two concurrent workers."""
    left = [total]

    async def worker() -> None:
        while left[0] > 0:
            left[0] -= 1
            sandbox = await hands.provision(recipe)
            await sandbox.execute("bash", {"command": "true"})
            await sandbox.destroy()

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker)
        tg.start_soon(worker)
    return total / (time.perf_counter() - start)


def report(
    mode: str, runs: int, prov: list[float], rtt: list[float], bare: list[float], rate: float
) -> None:
    bare_p50 = statistics.median(bare)
    rows = [
        ("provision (ms)", pct(prov, 0.5), pct(prov, 0.95), "<= 25 p50"),
        ("execute bash true (ms)", pct(rtt, 0.5), pct(rtt, 0.95), "<= 10 p50, 20 p95"),
        ("bare bwrap true spawn (ms)", bare_p50, pct(bare, 0.95), "reference"),
    ]
    print(f"LocalHands benchmark: {runs} runs each, limits via {mode}")
    print(f"{'metric':<28}{'p50':>9}{'p95':>9}  {'x bare p50':>10}  goal")
    for name, p50, p95, goal in rows:
        print(f"{name:<28}{p50:>9.2f}{p95:>9.2f}  {p50 / bare_p50:>10.2f}  {goal}")
    print(f"{'sandboxes/s (concurrency 2)':<28}{rate:>9.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    anyio.run(main, parser.parse_args().runs)
