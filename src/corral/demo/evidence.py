"""What the incident story's tool results say: facts gathered from them and the diagnosis.

Pure functions over tool-result text (the demo tools' JSON, bash output); no I/O, no state, and
no knowledge of the answer - the commits and causes come out of the data.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from corral.models.scripted import Call

CUSTOM_TOOLS = ("list_incidents", "get_recent_deploys", "get_metrics", "get_diff")


# --- what the tool results say -------------------------------------------------------------


@dataclass(slots=True)
class Facts:
    """What the turn's tool results established so far."""

    incidents: list[dict[str, Any]] = field(default_factory=list)
    deploys: list[dict[str, Any]] = field(default_factory=list)
    since: str = ""
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    diffs: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _error_of(call: Call) -> str | None:
    if call.result is None:
        return None
    if call.name == "bash" and re.match(r"\s*\d+\b", call.result):
        return None  # `grep -c` exits 1 when it counts 0 lines: a count, not a failure
    if call.is_error:
        return f"{call.name} failed ({_clip(call.result)})"
    if call.name in CUSTOM_TOOLS:
        doc = _json(call.result)
        if not isinstance(doc, dict):
            return f"{call.name} returned something that is not a JSON object"
        if "error" in doc:
            return f"{call.name} returned an error ({_clip(str(doc['error']))})"
    return None


def errors(calls: tuple[Call, ...]) -> list[str]:
    """One sentence per failed call."""
    return [e for e in map(_error_of, calls) if e is not None]


def gather(calls: tuple[Call, ...]) -> Facts:
    """Everything the successful results of `calls` established, plus the errors."""
    facts = Facts(errors=errors(calls))
    for call in calls:
        if call.result is None or _error_of(call) is not None:
            continue
        if call.name == "bash" and (m := re.search(r"\d+", call.result)):
            facts.counts[str(call.input.get("command"))] = int(m.group())
        elif call.name in CUSTOM_TOOLS:
            try:
                _absorb(facts, call.name, _json(call.result))
            except (KeyError, TypeError, ValueError):
                facts.errors.append(f"{call.name} returned an unexpected shape")
    return facts


def _absorb(facts: Facts, name: str, doc: Any) -> None:
    if name == "list_incidents":
        facts.incidents = [i for i in doc["incidents"] if i.get("status", "open") == "open"]
    elif name == "get_recent_deploys" and doc.get("service") is None:
        facts.deploys, facts.since = list(doc["deploys"]), str(doc["since"])
    elif name == "get_metrics" and "series" in doc:
        facts.metrics[str(doc["service"])] = doc
    elif name == "get_diff":
        facts.diffs[str(doc["commit"])] = str(doc["diff"])


# --- diagnosis -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """The diagnosis of one incident."""

    incident: dict[str, Any]
    kind: Literal["deploy", "symptom", "unknown"]
    deploy: dict[str, Any] | None = None
    diff_kind: Literal["cache", "n+1", "other", "unread"] = "unread"
    cause: str = ""
    evidence: str = ""
    culprit: str | None = None


def _suspect(incident: dict[str, Any], deploys: list[dict[str, Any]]) -> dict[str, Any] | None:
    opened = _time(incident["opened_at"])
    near = [
        d
        for d in deploys
        if d["service"] == incident["service"]
        and opened - timedelta(hours=2) <= _time(d["deployed_at"]) <= opened
    ]
    return max(near, key=lambda d: _time(d["deployed_at"]), default=None)


def diagnose(facts: Facts) -> list[Finding]:
    """One finding per open incident: caused by a deploy, a symptom of another, or unknown."""
    found: dict[str, Finding] = {}
    for inc in facts.incidents:
        deploy = _suspect(inc, facts.deploys)
        if deploy is not None:
            kind, cause = read_diff(facts.diffs.get(deploy["commit"]))
            evidence = _deploy_evidence(facts.metrics.get(inc["service"]))
            found[inc["id"]] = Finding(
                incident=inc,
                kind="deploy",
                deploy=deploy,
                diff_kind=kind,
                cause=cause,
                evidence=evidence,
            )
    for inc in facts.incidents:
        if inc["id"] not in found:
            found[inc["id"]] = _symptom(inc, facts, list(found.values()))
    return [found[i["id"]] for i in facts.incidents]


def read_diff(diff: str | None) -> tuple[Literal["cache", "n+1", "other", "unread"], str]:
    """What kind of change a diff is (a removed cache, an N+1 query, other) and why it hurts."""
    if diff is None:
        return "unread", "I could not read its diff, so this rests on timing and metrics"
    lines = diff.splitlines()
    removed = [x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---")]
    added = [x[1:].strip() for x in lines if x.startswith("+") and not x.startswith("+++")]
    loop = next((m for x in added if (m := re.match(r"for (\w+) in .*", x))), None)
    batched = next((x for x in removed if re.search(r"ANY\(|\bIN \(", x)), None)
    if loop and batched and any(re.search(r"fetch|execute|SELECT", x) for x in added):
        where = re.search(r"WHERE [^\"']+", batched)
        clause = where.group().strip() if where else batched
        return "n+1", (
            f"the diff replaces one batched query (`{clause}`) with one query per "
            f"`{loop.group(1)}` inside `{loop.group()}` - an N+1 on the shared database"
        )
    cache = next((x for x in removed if "cache" in x.lower() and "(" in x), None)
    if cache and not any("cache" in x.lower() for x in added if not x.startswith("#")):
        return "cache", (
            f"the diff removes the cache (`{cache}`), so every lookup now reads the database"
        )
    return "other", "its diff shows no cache or query change"


def _deploy_evidence(doc: dict[str, Any] | None) -> str:
    if doc is None:
        return "no per-service metrics were available"
    series, parts = doc["series"], []
    p99 = series.get("latency_p99_ms", [])
    if p99 and (at := _onset(p99, 2 * _base(p99))) is not None:
        parts.append(f"p99 {_base(p99):,.0f} -> {max(p99):,.0f} ms from {_clock(doc, at)}")
    conns, db = series.get("db_connections", []), doc.get("database") or {}
    if conns and max(conns) > 2 * _base(conns):
        parts.append(
            f"{db.get('name', 'db')} connections {_base(conns):.0f} -> {max(conns):.0f}"
            f" of {db.get('max_connections', '?')}"
        )
    share = max(conns, default=0) / float(db.get("max_connections") or 1e9)
    if (full := _saturated(doc)) is not None and share >= 0.5:
        parts.append(f"pool full from {_clock(doc, full)}")
    hits = series.get("cache_hit_ratio", [])
    if hits and _base(hits) > 0.5 and hits[-1] < 0.1:
        parts.append(f"cache hit ratio {_base(hits):.2f} -> {hits[-1]:.2f}")
    errs = series.get("error_rate_pct", [])
    if errs and max(errs) > 1:
        parts.append(f"errors up to {max(errs):.1f}%")
    return "; ".join(parts) or "its metrics look flat"


def _symptom(inc: dict[str, Any], facts: Facts, causes: list[Finding]) -> Finding:
    service, doc = inc["service"], facts.metrics.get(inc["service"])
    if doc is None:
        return Finding(incident=inc, kind="unknown", cause="no deploy and no metrics for it")
    series = doc["series"]
    onsets = [
        _onset(series["latency_p99_ms"], 2 * _base(series["latency_p99_ms"])),
        _onset(series["error_rate_pct"], max(1.0, 4 * _base(series["error_rate_pct"]))),
    ]
    onset = min((o for o in onsets if o is not None), default=None)
    full, culprit = _saturated(doc), _biggest_consumer(facts, causes)
    if onset is None or full is None or full > onset or culprit is None:
        return Finding(
            incident=inc,
            kind="unknown",
            cause=f"no {service} deploy since {short_time(facts.since)} and no clear trigger",
        )
    db, own = doc["database"], series.get("db_connections", [])
    evidence = (
        f"{service} errors began at {_clock(doc, onset)}, "
        f"{(onset - full) * doc['step_seconds'] // 60} min after {db['name']} filled up "
        f"({max(db['in_use'])}/{db['max_connections']} from {_clock(doc, full)})"
    )
    if own and own[-1] < _base(own):
        evidence += f", and its own connections fell {_base(own):.0f} -> {own[-1]:.0f}"
    return Finding(
        incident=inc,
        kind="symptom",
        culprit=culprit,
        evidence=evidence,
        cause=f"no {service} deploy since {short_time(facts.since)}",
    )


def _biggest_consumer(facts: Facts, causes: list[Finding]) -> str | None:
    growth: dict[str, float] = {}
    for finding in causes:
        service = finding.incident["service"]
        conns = facts.metrics.get(service, {}).get("series", {}).get("db_connections", [])
        if conns:
            growth[service] = max(conns) - _base(conns)
    return max(growth, key=lambda s: growth[s], default=None)


# --- small helpers -------------------------------------------------------------------------


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def hhmm(text: str) -> str:
    """`HH:MM` of an ISO timestamp."""
    return _time(text).strftime("%H:%M")


def short_time(text: str) -> str:
    """`YYYY-MM-DD HH:MM` of an ISO timestamp, or a phrase when unknown."""
    return _time(text).strftime("%Y-%m-%d %H:%M") if text else "the window checked"


def _clock(doc: dict[str, Any], index: int) -> str:
    return (_time(doc["start"]) + timedelta(seconds=index * doc["step_seconds"])).strftime("%H:%M")


def _base(values: list[float]) -> float:
    return float(statistics.median(values[: max(1, len(values) // 4)]))


def _onset(values: list[float], threshold: float) -> int | None:
    """First index where the series stays above `threshold` for two points."""
    return next(
        (i for i in range(len(values) - 1) if values[i] > threshold and values[i + 1] > threshold),
        None,
    )


def _saturated(doc: dict[str, Any]) -> int | None:
    db = doc.get("database")
    if not db:
        return None
    return _onset(db["in_use"], 0.95 * db["max_connections"] - 1e-9)
