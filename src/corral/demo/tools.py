"""The demo's four custom tools: their definitions and a client-side handler over the data dir.

Results are JSON text; bad input becomes `{"error": ...}`, never an exception, so the agent can
read the mistake and try again. Only reads files that `data.generate` wrote.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from corral.demo.data import NOW, iso, parse_iso

_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


_DEFINITIONS: list[dict[str, Any]] = [
    {
        "name": "list_incidents",
        "description": "List pager incidents (id, service, severity, title, opened_at). Open "
        "incidents by default.",
        "input_schema": {
            "type": "object",
            "properties": {
                "status": {
                    "type": "string",
                    "enum": ["open", "resolved", "all"],
                    "description": "Which incidents to list; default open.",
                }
            },
        },
    },
    {
        "name": "get_recent_deploys",
        "description": "Deploys to production in the last `hours` hours, oldest first: id, "
        "service, commit, title, author, deployed_at.",
        "input_schema": {
            "type": "object",
            "properties": {
                "service": {"type": "string", "description": "Only this service; default all."},
                "hours": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 168,
                    "description": "Look-back window; default 24.",
                },
            },
        },
    },
    {
        "name": "get_metrics",
        "description": "Metrics at 2-minute resolution ending now. With `service`: series of "
        "latency_p99_ms, error_rate_pct, db_connections (and cache_hit_ratio "
        "where cached) plus the shared database's connections in use. Without "
        "`service`: baseline and peak of every metric for every service.",
        "input_schema": {
            "type": "object",
            "properties": {
                "service": {
                    "type": "string",
                    "description": "Service name; omit for an overview.",
                },
                "minutes": {
                    "type": "integer",
                    "minimum": 10,
                    "maximum": 180,
                    "description": "Window length; default 180.",
                },
            },
        },
    },
    {
        "name": "get_diff",
        "description": "The unified diff of a deployed commit (short or full hash).",
        "input_schema": {
            "type": "object",
            "properties": {
                "commit": {"type": "string", "description": "Commit hash, e.g. from a deploy."}
            },
            "required": ["commit"],
        },
    },
]


def tool_definitions() -> list[dict[str, Any]]:
    """Tool definitions `{name, description, input_schema}`; agents add `type: custom`."""
    return copy.deepcopy(_DEFINITIONS)


def handle_tool(data_dir: Path, name: str, input: Mapping[str, Any]) -> str:
    """Answer one custom tool call from the files in `data_dir`; always returns JSON text."""
    handler = _HANDLERS.get(name)
    if handler is None:
        return _error(f"unknown tool {name!r}; known tools: {', '.join(_HANDLERS)}")
    if not isinstance(input, Mapping):
        return _error("input must be a JSON object")
    try:
        return json.dumps(handler(data_dir, input))
    except _BadInput as exc:
        return _error(str(exc))
    except FileNotFoundError as exc:
        return _error(f"demo data missing ({exc.filename}); run the data generator first")


def is_error_result(text: str) -> bool:
    """Whether a `handle_tool` result is an error (sent with `is_error: true`)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return True
    return isinstance(doc, dict) and "error" in doc


class _BadInput(ValueError):
    pass


def _error(message: str) -> str:
    return json.dumps({"error": message})


def _load(data_dir: Path, name: str) -> Any:
    return json.loads((data_dir / name).read_text(encoding="utf-8"))


def _int_arg(input: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = input.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _BadInput(f"{key} must be an integer from {low} to {high}, got {value!r}")
    return value


def _service_arg(data_dir: Path, input: Mapping[str, Any]) -> str | None:
    service = input.get("service")
    if service is None:
        return None
    known = sorted(p.stem for p in (data_dir / "metrics").glob("*.json"))
    if not isinstance(service, str) or service not in known:
        raise _BadInput(f"unknown service {service!r}; known services: {', '.join(known)}")
    return service


def _list_incidents(data_dir: Path, input: Mapping[str, Any]) -> dict[str, Any]:
    status = input.get("status", "open")
    if status not in ("open", "resolved", "all"):
        raise _BadInput(f"status must be open, resolved or all, got {status!r}")
    incidents = _load(data_dir, "incidents.json")["incidents"]
    chosen = [i for i in incidents if status == "all" or i["status"] == status]
    return {"now": iso(NOW), "status": status, "incidents": chosen}


def _get_recent_deploys(data_dir: Path, input: Mapping[str, Any]) -> dict[str, Any]:
    hours = _int_arg(input, "hours", 24, 1, 168)
    service = _service_arg(data_dir, input)
    since = NOW - timedelta(hours=hours)
    deploys = [
        d
        for d in _load(data_dir, "deploys.json")["deploys"]
        if parse_iso(d["deployed_at"]) >= since and service in (None, d["service"])
    ]
    return {"now": iso(NOW), "since": iso(since), "service": service, "deploys": deploys}


def _get_metrics(data_dir: Path, input: Mapping[str, Any]) -> dict[str, Any]:
    minutes = _int_arg(input, "minutes", 180, 10, 180)
    service = _service_arg(data_dir, input)
    if service is None:
        return _overview(data_dir, minutes)
    return _window(_load(data_dir, f"metrics/{service}.json"), minutes)


def _window(doc: dict[str, Any], minutes: int) -> dict[str, Any]:
    keep = minutes * 60 // doc["step_seconds"] + 1
    total = len(doc["series"]["latency_p99_ms"])
    start = parse_iso(doc["start"]) + timedelta(seconds=(total - keep) * doc["step_seconds"])
    series = {metric: values[-keep:] for metric, values in doc["series"].items()}
    database = doc["database"]
    if database is not None:
        database = {**database, "in_use": database["in_use"][-keep:]}
    return {**doc, "start": iso(start), "series": series, "database": database}


def _overview(data_dir: Path, minutes: int) -> dict[str, Any]:
    services = []
    for path in sorted((data_dir / "metrics").glob("*.json")):
        doc = _window(json.loads(path.read_text(encoding="utf-8")), minutes)
        summary: dict[str, Any] = {"service": doc["service"]}
        for metric, values in doc["series"].items():
            summary[metric] = {"baseline": values[0], "peak": max(values), "last": values[-1]}
        services.append(summary)
    return {
        "now": iso(NOW),
        "window_minutes": minutes,
        "services": services,
        "note": "baseline = first point of the window; ask with `service` for the series",
    }


def _get_diff(data_dir: Path, input: Mapping[str, Any]) -> dict[str, Any]:
    commit = input.get("commit")
    if not isinstance(commit, str) or not _COMMIT.match(commit.strip().lower()):
        raise _BadInput(f"commit must be a 7-40 character hex hash, got {commit!r}")
    short = commit.strip().lower()[:7]
    path = data_dir / "diffs" / f"{short}.diff"
    if not path.exists():
        known = sorted(p.stem for p in (data_dir / "diffs").glob("*.diff"))
        raise _BadInput(f"no deployed commit {commit!r}; deployed commits: {', '.join(known)}")
    deploy = next(
        (d for d in _load(data_dir, "deploys.json")["deploys"] if d["commit"] == short), None
    )
    return {"commit": short, "deploy": deploy, "diff": path.read_text(encoding="utf-8")}


_HANDLERS: dict[str, Callable[[Path, Mapping[str, Any]], dict[str, Any]]] = {
    "list_incidents": _list_incidents,
    "get_recent_deploys": _get_recent_deploys,
    "get_metrics": _get_metrics,
    "get_diff": _get_diff,
}
