"""Deterministic incident data for the demo: pages, deploys, diffs, metrics, runbook and app.log.

Everything derives from a seed, so two runs write byte-identical files; no network is used.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from corral.demo.applog import write_log
from corral.demo.fixtures import DIFFS, RUNBOOK_MD

NOW = datetime(2026, 4, 22, 2, 45, tzinfo=UTC)
"""The demo's "now": 2:45 a.m., sixteen minutes after the third page."""
MIDNIGHT = datetime(2026, 4, 22, tzinfo=UTC)
METRICS_START = NOW - timedelta(minutes=180)
METRICS_STEP_SECONDS = 120
DB_NAME = "orders-db"
DB_MAX_CONNECTIONS = 200
DEFAULT_SEED = 2275
DEFAULT_LOG_LINES = 74_164

CULPRIT_COMMITS: dict[str, str] = {"inventory": "c81d4e7", "checkout": "a3f9c21"}
"""The answer: the deploy that caused each page. Cart has none: it is checkout's symptom."""
METRIC_SERVICES = ("inventory", "checkout", "cart", "search", "payments")

INCIDENTS: list[dict[str, Any]] = [
    {
        "id": "INC-2275",
        "service": "inventory",
        "severity": "SEV2",
        "status": "open",
        "title": "inventory-api p99 latency above 2s",
        "opened_at": "2026-04-22T02:03:00Z",
    },
    {
        "id": "INC-2276",
        "service": "checkout",
        "severity": "SEV1",
        "status": "open",
        "title": "checkout error rate above 5% on POST /api/checkout",
        "opened_at": "2026-04-22T02:14:00Z",
    },
    {
        "id": "INC-2277",
        "service": "cart",
        "severity": "SEV2",
        "status": "open",
        "title": "cart-api 5xx rate above 3%",
        "opened_at": "2026-04-22T02:29:00Z",
    },
    {
        "id": "INC-2261",
        "service": "search",
        "severity": "SEV3",
        "status": "resolved",
        "title": "search index lag above 10 minutes",
        "opened_at": "2026-04-19T14:12:00Z",
    },
]

DEPLOYS: list[dict[str, Any]] = [
    {
        "id": "dep-1038",
        "service": "cart",
        "commit": "e19f0c3",
        "author": "mina.park",
        "title": "add promo banner feature flag",
        "deployed_at": "2026-04-20T11:02:00Z",
    },
    {
        "id": "dep-1041",
        "service": "inventory",
        "commit": "5be01a9",
        "author": "li.wei",
        "title": "bump structlog to 24.1",
        "deployed_at": "2026-04-21T16:40:00Z",
    },
    {
        "id": "dep-1042",
        "service": "payments",
        "commit": "9c0d5e2",
        "author": "sam.okafor",
        "title": "rotate webhook TLS certificate",
        "deployed_at": "2026-04-21T20:15:00Z",
    },
    {
        "id": "dep-1043",
        "service": "checkout",
        "commit": "7d2e6b0",
        "author": "jo.martin",
        "title": "update receipt email copy",
        "deployed_at": "2026-04-21T22:10:00Z",
    },
    {
        "id": "dep-1044",
        "service": "search",
        "commit": "4f8a2d1",
        "author": "li.wei",
        "title": "tune search ranking weights",
        "deployed_at": "2026-04-22T00:30:00Z",
    },
    {
        "id": "dep-1045",
        "service": "inventory",
        "commit": "c81d4e7",
        "author": "dana.ruiz",
        "title": "remove product cache (cache layer moves to CDN edge)",
        "deployed_at": "2026-04-22T01:48:00Z",
    },
    {
        "id": "dep-1046",
        "service": "checkout",
        "commit": "a3f9c21",
        "author": "jo.martin",
        "title": "per-order lookup of reservations for fresher stock state",
        "deployed_at": "2026-04-22T01:57:00Z",
    },
]


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoData:
    """Where the generated data lives and how big the log came out."""

    root: Path
    log_path: Path
    log_lines: int
    log_bytes: int


def generate(
    data_dir: Path, *, seed: int = DEFAULT_SEED, log_lines: int = DEFAULT_LOG_LINES
) -> DemoData:
    """Write the incident data set into `data_dir` (created if missing); same seed, same bytes."""
    data_dir.mkdir(parents=True, exist_ok=True)
    _write_json(data_dir / "incidents.json", {"incidents": INCIDENTS})
    _write_json(data_dir / "deploys.json", {"deploys": DEPLOYS})
    (data_dir / "diffs").mkdir(exist_ok=True)
    for commit, diff in DIFFS.items():
        (data_dir / "diffs" / f"{commit}.diff").write_text(diff, encoding="utf-8")
    metrics_dir = data_dir / "metrics"
    metrics_dir.mkdir(exist_ok=True)
    rng = random.Random(seed)
    for service, doc in build_metrics(rng).items():
        _write_json(metrics_dir / f"{service}.json", doc)
    skill = data_dir / "skills" / "incident-triage-runbook"
    skill.mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text(RUNBOOK_MD, encoding="utf-8")
    log_path = data_dir / "app.log"
    size = write_log(log_path, seed=seed, lines=log_lines, start=MIDNIGHT, end=NOW)
    return DemoData(root=data_dir, log_path=log_path, log_lines=log_lines, log_bytes=size)


def iso(moment: datetime) -> str:
    """The data set's timestamp format: UTC, seconds, `Z` suffix."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    """Inverse of `iso`; accepts any ISO 8601 form with an offset."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _write_json(path: Path, doc: object) -> None:
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


# --- metrics -------------------------------------------------------------------------------
# Each curve takes minutes since midnight (negative before it) and a noise source.

Noise = Callable[[float], float]


def _ramp(t: float, start: float, minutes: float) -> float:
    return max(0.0, min(1.0, (t - start) / minutes))


def _inventory(t: float, n: Noise) -> dict[str, float]:
    after = t >= 108  # c81d4e7 removed the product cache at 01:48
    return {
        "latency_p99_ms": 170 + 2230 * _ramp(t, 108, 6) + n(90 if after else 12),
        "error_rate_pct": (1.1 * _ramp(t, 109, 4)) + 0.12 + n(0.03),
        "db_connections": (38 if after else 12) + n(3 if after else 1.5),
        "cache_hit_ratio": 0.0 if after else 0.95 + n(0.01),
    }


def _checkout_demand(t: float) -> float:
    return 22 + 7.0 * max(0.0, t - 117)  # a3f9c21 at 01:57: one query per order


def _checkout(t: float, n: Noise, available: float) -> dict[str, float]:
    saturated = _checkout_demand(t) >= available
    p99 = 420 + (min(_checkout_demand(t), available) - 22) * 9
    if saturated:
        p99 = 2600 + 1040 * _ramp(t, 130, 14)
    return {
        "latency_p99_ms": p99 + n(60 if saturated else 30),
        "error_rate_pct": 0.25 + min(8.4, 0.9 * max(0.0, t - 128)) + n(0.05 + 0.25 * saturated),
        "db_connections": min(_checkout_demand(t), available) + n(2),
    }


def _cart(t: float, n: Noise) -> dict[str, float]:
    starved = t >= 136  # checkout took its connections as they recycled
    return {
        "latency_p99_ms": 260 + 4800 * _ramp(t, 138, 8) + n(100 if t >= 138 else 20),
        "error_rate_pct": 0.1 + min(6.4, 0.8 * max(0.0, t - 138)) + n(0.03),
        "db_connections": (4 if starved else 14) + n(1),
        "cache_hit_ratio": 0.9 + n(0.01),
    }


def _flat(p99: float, err: float, conns: float) -> Callable[[float, Noise], dict[str, float]]:
    def curve(t: float, n: Noise) -> dict[str, float]:
        return {
            "latency_p99_ms": p99 + n(p99 * 0.06),
            "error_rate_pct": err + n(err * 0.2),
            "db_connections": conns + n(conns * 0.1),
        }

    return curve


def build_metrics(rng: random.Random) -> dict[str, dict[str, Any]]:
    """Two-minute series for every service over the 180 minutes before `NOW`."""

    def noise(sigma: float) -> float:
        return rng.gauss(0.0, sigma)

    others = {"search": _flat(95, 0.05, 0), "payments": _flat(310, 0.2, 8)}
    series: dict[str, dict[str, list[float]]] = {s: {} for s in METRIC_SERVICES}
    in_use: list[float] = []
    points = 180 * 60 // METRICS_STEP_SECONDS + 1
    for i in range(points):
        t = (METRICS_START - MIDNIGHT).total_seconds() / 60 + i * METRICS_STEP_SECONDS / 60
        row = {"inventory": _inventory(t, noise), "cart": _cart(t, noise)}
        row.update({name: curve(t, noise) for name, curve in others.items()})
        fixed = sum(row[s]["db_connections"] for s in row) + 30  # 30: batch jobs
        row["checkout"] = _checkout(t, noise, DB_MAX_CONNECTIONS - fixed)
        in_use.append(min(DB_MAX_CONNECTIONS, fixed + row["checkout"]["db_connections"]))
        for service, values in row.items():
            for metric, value in values.items():
                series[service].setdefault(metric, []).append(value)
    return {s: _metrics_doc(s, series[s], in_use) for s in METRIC_SERVICES}


def _metrics_doc(
    service: str, series: dict[str, list[float]], in_use: list[float]
) -> dict[str, Any]:
    rounded = {metric: [_round(metric, v) for v in values] for metric, values in series.items()}
    uses_db = any(v > 0 for v in rounded["db_connections"])
    database = None
    if uses_db:
        database = {
            "name": DB_NAME,
            "max_connections": DB_MAX_CONNECTIONS,
            "in_use": [round(v) for v in in_use],
        }
    else:
        del rounded["db_connections"]
    return {
        "service": service,
        "start": iso(METRICS_START),
        "step_seconds": METRICS_STEP_SECONDS,
        "series": rounded,
        "database": database,
    }


def _round(metric: str, value: float) -> float:
    if metric == "cache_hit_ratio":
        return round(max(0.0, min(1.0, value)), 3)
    if metric == "error_rate_pct":
        return round(max(0.0, value), 2)
    return float(max(0, round(value)))
