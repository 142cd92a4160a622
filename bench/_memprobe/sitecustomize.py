"""Bench-only memory probe, loaded into the server under test through PYTHONPATH by
`bench/soak.py --memprobe DIR` (never part of the product). Every `SOAK_MEMPROBE_EVERY`
seconds it appends one JSON line to DIR/mem.jsonl (RSS, the Python heap tracemalloc sees,
SQLite's own allocations, glibc's arena totals) and, when tracemalloc is on, writes a snapshot
DIR/snap-<seconds>.pickle, so the growth can be split between Python objects, SQLite and the
allocator's fragmentation, and the Python part diffed by traceback."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
import tracemalloc
import weakref
from pathlib import Path
from typing import Any


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_DBSTATUS = {"sqlite_lookaside": 0, "sqlite_cache": 1, "sqlite_schema": 2, "sqlite_stmt": 3}


def _sqlite_connections(sqlite: ctypes.CDLL | None) -> dict[str, float]:
    """Open connections and their memory by kind (sqlite3_db_status), read from each
    `sqlite3.Connection`'s handle (the first field after the object header)."""
    import gc
    import sqlite3

    out = dict.fromkeys(("sqlite_connections", "sqlite_closed", "sqlite_cursors", *_DBSTATUS), 0.0)
    if sqlite is None:
        return out
    out["sqlite_cursors"] = sum(isinstance(obj, sqlite3.Cursor) for obj in gc.get_objects())
    # Not gc.get_objects(): connections opened before the server's gc.freeze() (the writer)
    # are not in it; the counting class keeps a weak set of all of them.
    for obj in list(_OPEN):
        handle = ctypes.c_void_p.from_address(id(obj) + 2 * ctypes.sizeof(ctypes.c_void_p))
        if not handle.value:
            out["sqlite_closed"] += 1  # closed: its memory is freed unless a statement lives
            continue
        out["sqlite_connections"] += 1
        for name, op in _DBSTATUS.items():
            cur, high = ctypes.c_int(), ctypes.c_int()
            if sqlite.sqlite3_db_status(handle, op, ctypes.byref(cur), ctypes.byref(high), 0) == 0:
                out[name] += cur.value / 2**20
    return out


def _sqlite_status(sqlite: ctypes.CDLL | None, op: int) -> float:
    """A process-wide sqlite3_status64 counter's current value."""
    cur, high = ctypes.c_int64(), ctypes.c_int64()
    if sqlite is None or sqlite.sqlite3_status64(op, ctypes.byref(cur), ctypes.byref(high), 0):
        return -1.0
    return float(cur.value)


def _reading(libc: ctypes.CDLL, sqlite: ctypes.CDLL | None, start: float) -> dict[str, float]:
    info = libc.mallinfo2()

    with open("/proc/self/status") as status:
        kib = {
            name: int(rest.split()[0])
            for name, _, rest in (line.partition(":") for line in status)
            if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem")
        }
    rss_kib = kib["VmRSS"]
    mib = 2**20
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    return {
        "t": time.monotonic() - start,
        "rss": rss_kib / 1024,
        "rss_anon": kib.get("RssAnon", 0) / 1024,
        "rss_file": kib.get("RssFile", 0) / 1024,
        "rss_shmem": kib.get("RssShmem", 0) / 1024,
        "py_traced": traced / mib,
        "py_blocks_k": sys.getallocatedblocks() / 1000,
        "sqlite_memory": (sqlite.sqlite3_memory_used() / mib) if sqlite else -1,
        "sqlite_pagecache": _sqlite_status(sqlite, 2) / mib,  # SQLITE_STATUS_PAGECACHE_OVERFLOW
        "sqlite_allocations_k": _sqlite_status(sqlite, 9) / 1000,  # SQLITE_STATUS_MALLOC_COUNT
        **_sqlite_connections(sqlite),
        **_COUNTS,
        "malloc_arena": info.arena / mib,
        "malloc_used": info.uordblks / mib,
        "malloc_free": info.fordblks / mib,
        "mmapped": info.hblkhd / mib,
        "threads": threading.active_count(),
    }


def _probe(out: Path, every: float) -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    try:
        import _sqlite3

        sqlite: ctypes.CDLL | None = ctypes.CDLL(_sqlite3.__file__)
        sqlite.sqlite3_memory_used.restype = ctypes.c_int64  # type: ignore[union-attr]
    except (ImportError, OSError, AttributeError):
        sqlite = None
    start = time.monotonic()
    while True:
        time.sleep(every)
        line = _reading(libc, sqlite, start)
        with (out / "mem.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(out / f"snap-{line['t']:06.0f}.pickle"))


_OPEN: weakref.WeakSet[Any] = weakref.WeakSet()
_COUNTS = {"sqlite_opened": 0, "sqlite_close_calls": 0, "sqlite_freed": 0}


def _count_connections() -> None:
    """Count connections opened, closed and deallocated (a connection class of our own)."""
    import sqlite3

    class _Counted(sqlite3.Connection):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _COUNTS["sqlite_opened"] += 1
            _OPEN.add(self)

        def close(self) -> None:
            _COUNTS["sqlite_close_calls"] += 1
            super().close()

        def __del__(self) -> None:
            _COUNTS["sqlite_freed"] += 1

    real = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        kwargs.setdefault("factory", _Counted)
        conn: sqlite3.Connection = real(*args, **kwargs)
        return conn

    sqlite3.connect = connect  # type: ignore[assignment]


if os.environ.get("SOAK_MEMPROBE"):
    _count_connections()
    _dir = Path(os.environ["SOAK_MEMPROBE"])
    _dir.mkdir(parents=True, exist_ok=True)
    _every = float(os.environ.get("SOAK_MEMPROBE_EVERY", "60"))
    threading.Thread(target=_probe, args=(_dir, _every), name="memprobe", daemon=True).start()
