"""The second act's thread agents for `corral-scripted`: the log analyst and the diff reviewer.

Each works on the task the lead gave it (the prompt of its thread), writes a report into the
shared /workspace and ends its turn with a reply that ends in `- Lesson:` lines. Their
findings come from their tool results (grep/awk counts, the demo's diffs), never from
hard-coded answers.
"""

from __future__ import annotations

import json
import re
import statistics
from typing import Any

from corral.demo.evidence import read_diff
from corral.demo.team import FOLLOWUP_DIR
from corral.models.scripted import LABEL, Call, Move, Turn

_POOL = "connection pool exhausted"
_CACHE = "cache miss"
_COUNTS = (  # (what to grep, how to summarise it): a few lines each, never the log itself
    ("deploy finished", "awk '{print substr($1,12,5), $3, $8}'"),
    (
        _POOL,
        "awk '{n[$3]++; if (!($3 in f)) f[$3]=substr($1,12,5)} "
        "END {for (s in n) print f[s], s, n[s]}' | sort",
    ),
    (_CACHE, "awk '{print substr($1,12,4) \"0\", $3}' | uniq -c"),
)

__all__ = ["analyst_move", "reviewer_move"]


def _done(turn: Turn, name: str) -> list[Call]:
    return [c for c in turn.calls if c.name == name and c.result is not None]


def _commits(text: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"\b[0-9a-f]{7}\b", text)))


def _reply(turn: Turn, title: str, lines: list[str], path: str) -> Move:
    wrote = any(not c.is_error for c in _done(turn, "write"))
    where = f"Details: {path}." if wrote else "(Writing the report failed.)"
    text = f"{LABEL} {title} (scripted demo model):\n" + "\n".join(lines) + f"\n{where}"
    return Move(text=text)


# --- the log analyst -----------------------------------------------------------------------


def analyst_move(turn: Turn) -> Move:
    """grep/awk the log once, write the timeline, reply."""
    found = re.search(r"/mnt/session/uploads/[\w.-]+\.log\b", turn.prompt)
    log = found.group() if found else "/mnt/session/uploads/app.log"
    runs = _done(turn, "bash")
    if not runs:
        return Move(
            text=f"Timing deploys, pool errors and cache misses in {log} with grep and awk.",
            calls=tuple(("bash", {"command": f"grep '{n}' {log} | {p}"}) for n, p in _COUNTS),
        )
    lines = _timeline(turn.prompt, runs)
    path = f"{FOLLOWUP_DIR}/log-timeline.md"
    if not _done(turn, "write"):
        body = "# Log timeline\n\n" + "\n".join(lines) + "\n"
        return Move(
            text="Writing the timeline for the team.",
            calls=(("write", {"file_path": path, "content": body}),),
        )
    return _reply(turn, "Log timeline", lines, path)


def _output(runs: list[Call], needle: str) -> list[list[str]]:
    run = next((c for c in runs if needle in str(c.input.get("command"))), None)
    if run is None or run.is_error:
        return []
    return [line.split() for line in (run.result or "").splitlines() if line.strip()]


def _timeline(task: str, runs: list[Call]) -> list[str]:
    wanted = set(_commits(task))
    deploys = [
        (at, svc.removeprefix("svc="), commit.removeprefix("commit="))
        for at, svc, commit in (r for r in _output(runs, "deploy finished") if len(r) == 3)
    ]
    ours = [d for d in deploys if d[2] in wanted] or deploys
    lines = ["- Deploys: " + "; ".join(f"{at} {c} ({svc})" for at, svc, c in ours) + "."]
    pool = [r for r in _output(runs, _POOL) if len(r) == 3 and r[2].isdigit()]
    if pool:
        first = "; ".join(
            f"{at} {svc.removeprefix('svc=')} ({int(n):,} lines)" for at, svc, n in pool
        )
        lines.append(f'- "{_POOL}" first seen: {first}.')
    cache = _cache_change(_output(runs, _CACHE), deploys)
    if cache is not None:
        lines.append(cache[0])
    if len(pool) >= 2:
        (at, svc, _), (later, other, _) = pool[0], pool[-1]
        lines.append(
            f"- Lesson: alert on the shared orders-db pool itself (in use vs. max), not only "
            f"per service: {other.removeprefix('svc=')} paged after {svc.removeprefix('svc=')} "
            f"exhausted the pool they share ({at} -> {later})."
        )
    if cache is not None:
        lines.append(cache[1])
    return lines


def _cache_change(
    rows: list[list[str]], deploys: list[tuple[str, str, str]]
) -> tuple[str, str] | None:
    """Cache misses per 10 minutes before and after the deploy of the service logging them."""
    buckets = [(r[1], r[2].removeprefix("svc="), int(r[0])) for r in rows if len(r) == 3]
    if not buckets:
        return None
    service = buckets[0][1]
    deploy = next((d for d in deploys if d[1] == service), None)
    if deploy is None:
        return None
    at = deploy[0][:4] + "0"
    before = [n for b, _, n in buckets if b < at]
    after = [n for b, _, n in buckets[:-1] if b > at]  # the last bucket is partial
    if not before or not after:
        return None
    was, now = statistics.median(before), statistics.median(after)
    line = f'- "{_CACHE}" ({service}): ~{was:.0f} per 10 min before {deploy[0]}, ~{now:.0f} after.'
    if now < 3 * max(was, 1):
        return line, f"- Lesson: {service}'s cache misses did not change much around its deploy."
    lesson = (
        f"- Lesson: watch the cache miss rate after a deploy that touches the cache: "
        f"{service}'s went from ~{was:.0f} to ~{now:.0f} per 10 min right after {deploy[2]}, "
        "long before anyone was paged."
    )
    return line, lesson


# --- the diff reviewer ---------------------------------------------------------------------

_LESSONS = {
    "n+1": (
        "- Lesson: a query inside a loop over a batch (an N+1) needs review: {c} made checkout "
        "exhaust the orders-db pool it shares with cart; keep lookups batched (`ANY(...)`) and "
        "test the query count per request."
    ),
    "cache": (
        "- Lesson: removing a cache moves its whole load onto the database: {c} should have "
        "shipped behind a flag with a load test, keeping the cache until its replacement serves "
        "traffic."
    ),
    "other": "- Lesson: {c} shows no cache or query change; review it with its owners.",
    "unread": "- Lesson: {c}'s diff could not be read; review it before the next release.",
}


def reviewer_move(turn: Turn) -> Move:
    """get_diff each commit of the task, write the review, reply."""
    commits = _commits(turn.prompt)
    if not commits:
        return Move(text=f"{LABEL} Scripted demo model: the task names no commit to review.")
    diffs = _done(turn, "get_diff")
    if not diffs:
        return Move(
            text=f"Reading the diffs of {', '.join(commits)}.",
            calls=tuple(("get_diff", {"commit": c}) for c in commits),
        )
    lines, lessons = [], []
    for call in diffs:
        commit, doc = str(call.input.get("commit")), _json(call.result)
        deploy = doc.get("deploy") or {}
        kind, cause = read_diff(None if call.is_error or "diff" not in doc else str(doc["diff"]))
        head = f'{commit} ({deploy.get("service", "?")}, "{deploy.get("title", "?")}")'
        lines.append(f"- {head}: {cause}.")
        lessons.append(_LESSONS[kind].format(c=commit))
    path = f"{FOLLOWUP_DIR}/diff-review.md"
    if not _done(turn, "write"):
        body = "# Diff review\n\n" + "\n".join(lines + lessons) + "\n"
        return Move(
            text="Writing the review for the team.",
            calls=(("write", {"file_path": path, "content": body}),),
        )
    return _reply(turn, "Diff review", lines + lessons, path)


def _json(text: str | None) -> dict[str, Any]:
    try:
        doc = json.loads(text or "")
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
