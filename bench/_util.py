"""Shared helpers for the benchmark scripts: repo import path, percentiles, tables, rlimits.

Importing it puts the repository root on sys.path so `tests.*` helpers import. No timing here.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import shutil
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN when there are no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def ms(seconds: float) -> str:
    """Seconds as a short millisecond string."""
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain left-aligned text table."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def raise_nofile() -> int:
    """Raise this process's open-file limit to the hard limit (children inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def stop_on_signals() -> None:
    """Turn SIGTERM and SIGHUP into SystemExit, so `finally` blocks stop the servers a bench
    started (each in its own session, out of reach of a signal to the bench's group) when
    the bench itself is stopped by `timeout`, a CI job's end or a closed terminal."""

    def stop(signum: int, _frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)  # a second signal kills at once
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)


def disk_tempdir(prefix: str) -> Path:
    """A temp dir on the repo's filesystem (not tmpfs), so fsync costs what it costs."""
    base = Path(os.environ.get("CORRAL_BENCH_DIR", ROOT / ".bench-tmp"))
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def remove_tempdir(path: Path) -> None:
    """Delete a `disk_tempdir` and its parent when that is left empty."""
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def verdict(ok: bool) -> str:
    """A goal check word."""
    return "ok" if ok else "MISS"
