"""Streams the demo's app.log (~74k lines, ~16 MB) from a seed, fast enough to run in a test.

The log carries the tell-tale lines the story needs (cache misses, per-order queries, pool
exhaustion); it never holds the whole file in memory.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

Line = tuple[str, str]
"""(level, message) of one log line."""

_SERVICES = ("gateway", "inventory", "checkout", "cart", "search", "payments")
_WEIGHTS = (0.22, 0.2, 0.16, 0.2, 0.13, 0.09)
_HOSTS = {
    s: [f"{s}-{h}" for h in ("7c9f5d-2xk4q", "7c9f5d-8mzt1", "7c9f5d-q4lw9")] for s in _SERVICES
}
_ROUTES = {
    "gateway": ("GET /", "GET /api/session", "GET /static/app.js", "GET /healthz"),
    "inventory": ("GET /api/products/{n}", "GET /api/stock/{n}", "GET /api/products"),
    "checkout": ("POST /api/checkout", "GET /api/checkout/{n}", "POST /api/checkout/quote"),
    "cart": ("GET /api/cart", "POST /api/cart/items", "DELETE /api/cart/items/{n}"),
    "search": ("GET /api/search", "GET /api/search/suggest"),
    "payments": ("POST /api/payments/authorize", "POST /api/payments/webhook"),
}
_AGENTS = (
    "Mozilla/5.0 (iPhone; iOS 17_4) Mobile/15E148",
    "Mozilla/5.0 (Windows NT 10.0) Chrome/124.0",
    "Mozilla/5.0 (Macintosh) Safari/17.4",
    "AcmeShop-Android/5.12.0 okhttp/4.12",
)
_MARKERS = (  # (minute, service, message): deploy events, in time order
    (30.2, "search", 'msg="deploy finished" commit=4f8a2d1 deploy=dep-1044'),
    (108.2, "inventory", 'msg="deploy finished" commit=c81d4e7 deploy=dep-1045'),
    (108.3, "inventory", 'msg="product cache disabled" reason="cache layer removed"'),
    (117.7, "checkout", 'msg="deploy finished" commit=a3f9c21 deploy=dep-1046'),
)
_POOL = 'msg="orders-db connection pool exhausted" in_use=200 max=200 waiters={w} wait_ms=5000'
_PER_ORDER = (
    'msg="db query" db=orders-db rows={r} duration_ms={d} statement="SELECT order_id, '
    'sku, qty FROM reservations WHERE order_id = $1"'
)
_BATCH = (
    'msg="db query" db=orders-db rows={r} duration_ms={d} statement="SELECT order_id, '
    'sku, qty FROM reservations WHERE order_id = ANY($1)"'
)


def write_log(path: Path, *, seed: int, lines: int, start: datetime, end: datetime) -> int:
    """Write exactly `lines` lines spread over [start, end); returns the size in bytes."""
    rng = random.Random(seed)
    span_ms = int((end - start).total_seconds() * 1000)
    day = start.strftime("%Y-%m-%d")
    regular = lines - len(_MARKERS)
    markers = list(_MARKERS)
    size = 0
    with path.open("w", encoding="utf-8", newline="\n") as out:
        batch: list[str] = []
        for i in range(regular):
            ms = i * span_ms // regular + rng.randrange(span_ms // regular)
            while markers and markers[0][0] * 60_000 <= ms:
                minute, service, message = markers.pop(0)
                batch.append(_format(day, int(minute * 60_000), "INFO", service, message, rng))
            service = rng.choices(_SERVICES, _WEIGHTS)[0]
            level, message = _BEHAVIOUR[service](ms / 60_000, rng)
            batch.append(_format(day, ms, level, service, message, rng))
            if len(batch) >= 4096:
                size += out.write("".join(batch))
                batch.clear()
        size += out.write("".join(batch))
    return size


def _format(day: str, ms: int, level: str, service: str, message: str, rng: random.Random) -> str:
    seconds, milli = divmod(ms, 1000)
    minutes, sec = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    host = _HOSTS[service][rng.randrange(3)]
    trace = rng.getrandbits(64)
    return (
        f"{day}T{hour:02d}:{minute:02d}:{sec:02d}.{milli:03d}Z {level:<5} svc={service} "
        f"host={host} trace={trace:016x} {message}\n"
    )


def _access(service: str, rng: random.Random, duration: int, status: int = 200) -> str:
    route = rng.choice(_ROUTES[service]).replace("{n}", str(rng.randrange(10_000, 99_999)))
    return (
        f'msg="request completed" route="{route}" status={status} duration_ms={duration} '
        f'bytes={rng.randrange(200, 40_000)} ua="{rng.choice(_AGENTS)}"'
    )


def _gateway(t: float, rng: random.Random) -> Line:
    if rng.random() < 0.01:
        return "WARN", 'msg="upstream slow" upstream=recommendations duration_ms=812 budget_ms=800'
    return "INFO", _access("gateway", rng, rng.randrange(3, 60))


def _inventory(t: float, rng: random.Random) -> Line:
    r, sku = rng.random(), rng.randrange(10_000, 99_999)
    if t < 108:
        if r < 0.03:
            return "DEBUG", f'msg="product cache miss" sku=SKU-{sku} cache_backend=local'
        return "INFO", _access("inventory", rng, rng.randrange(8, 160))
    if r < 0.35:
        return "WARN", (
            f'msg="product cache miss" sku=SKU-{sku} cache_backend=none '
            f"fallback=orders-db lookup_ms={rng.randrange(300, 2600)}"
        )
    if r < 0.45:
        return "WARN", (
            f'msg="slow query" db=orders-db duration_ms={rng.randrange(900, 2700)} '
            'statement="SELECT * FROM products WHERE sku = $1"'
        )
    return "INFO", _access("inventory", rng, rng.randrange(400, 2600))


def _checkout(t: float, rng: random.Random) -> Line:
    r = rng.random()
    if t < 117.7:
        if r < 0.05:
            return "DEBUG", _BATCH.format(r=rng.randrange(20, 90), d=rng.randrange(4, 20))
        return "INFO", _access("checkout", rng, rng.randrange(60, 420))
    if r < 0.3:
        return "DEBUG", _PER_ORDER.format(r=rng.randrange(1, 5), d=rng.randrange(2, 40))
    if t >= 130 and r < 0.5:
        return "ERROR", _POOL.format(w=rng.randrange(12, 60))
    if t >= 130 and r < 0.7:
        return "ERROR", _access("checkout", rng, rng.randrange(3000, 5300), status=503)
    return "INFO", _access("checkout", rng, rng.randrange(300, 2200))


def _cart(t: float, rng: random.Random) -> Line:
    r = rng.random()
    if t >= 138 and r < 0.15:
        return "ERROR", _POOL.format(w=rng.randrange(12, 60))
    if t >= 138 and r < 0.3:
        return "ERROR", (
            'msg="request failed" route="POST /api/cart/items" status=503 '
            'error="db acquire timeout after 5000ms" pool=orders-db'
        )
    return "INFO", _access("cart", rng, rng.randrange(10, 260))


def _search(t: float, rng: random.Random) -> Line:
    if rng.random() < 0.004:
        return "WARN", 'msg="index refresh slow" index=products duration_ms=1420'
    return "INFO", _access("search", rng, rng.randrange(5, 95))


def _payments(t: float, rng: random.Random) -> Line:
    if rng.random() < 0.006:
        return "WARN", 'msg="webhook retry" provider=stripe attempt=2 status=502'
    return "INFO", _access("payments", rng, rng.randrange(40, 310))


_BEHAVIOUR: dict[str, Callable[[float, random.Random], Line]] = {
    "gateway": _gateway,
    "inventory": _inventory,
    "checkout": _checkout,
    "cart": _cart,
    "search": _search,
    "payments": _payments,
}
