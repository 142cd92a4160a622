"""The chaos checker: reads every log straight from PostgreSQL (seq, writer lease) and each
session's executed.log, compares them with what the SSE clients and events.list saw, and
counts violations by kind. Read-only; it never repairs anything.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from _chaos_client import Record
from _chaos_model import BASH_MARK

from corral.wire.events import INTERNAL_EVENT_TYPES

INTERRUPTED = "outcome is unknown"
APPEND_REJECTED = re.compile(r"lease on \S+ lost; another brain continues")
HEARTBEAT_LOST = re.compile(r"lease on \S+ was lost; stopping this brain")
RECORD = re.compile(r"\n(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
"""Splits a worker log into log records (a record's traceback lines stay with it)."""
BRAIN_ERRORS = re.compile(r"brain crashed on|brain failed on|could not report the crash")


@dataclass(slots=True)
class Tally:
    """Counts of one run; `violations` maps kind -> examples."""

    sessions: int = 0
    turns: int = 0
    events: int = 0
    bash_uses: int = 0
    bash_executions: int = 0
    custom_uses: int = 0
    interrupted: int = 0
    interrupted_but_ran: int = 0
    sandbox_errors: int = 0
    append_rejections: int = 0
    lease_lost_logged_as_crash: int = 0
    heartbeat_losses: int = 0
    brain_errors: int = 0
    violations: dict[str, list[str]] = field(default_factory=dict)

    def violate(self, kind: str, detail: str) -> None:
        """Record one violation."""
        self.violations.setdefault(kind, []).append(detail)

    @property
    def violation_count(self) -> int:
        """All violations of every kind."""
        return sum(len(v) for v in self.violations.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One stored event with the lease that appended it."""

    seq: int
    id: str
    type: str
    body: dict[str, Any]
    owner: str | None
    token: int | None


def load_logs(database_url: str) -> tuple[dict[str, int], dict[str, list[Row]]]:
    """(last_seq per session, events per session in seq order) straight from the tables."""
    logs: dict[str, list[Row]] = {}
    with psycopg.connect(database_url) as conn:
        last = {str(r[0]): int(r[1]) for r in conn.execute("SELECT id, last_seq FROM sessions")}
        cur = conn.execute(
            "SELECT session_id, seq, id, type, body, writer_owner, writer_token FROM events "
            "ORDER BY session_id, seq"
        )
        for sid, seq, eid, kind, body, owner, token in cur:
            row = Row(seq=int(seq), id=eid, type=kind, body=body, owner=owner, token=token)
            logs.setdefault(str(sid), []).append(row)
    return last, logs


LIVE_INTERLEAVINGS = """
SELECT count(*) FROM (
    SELECT writer_token < max(writer_token) OVER (
        PARTITION BY session_id ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
    ) AS back FROM events WHERE writer_token IS NOT NULL
) t WHERE back
"""


def live_interleavings(database_url: str) -> int:
    """The epoch check in one query, cheap enough to run while the chaos goes on."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(LIVE_INTERLEAVINGS).fetchone()
    return int(row[0]) if row else 0


def check_all(
    tally: Tally,
    database_url: str,
    data_dir: Path,
    records: Sequence[Record],
    api_lists: Mapping[str, list[str]],
) -> None:
    """Run every check over every session of the run."""
    last_seqs, logs = load_logs(database_url)
    all_ids: Counter[str] = Counter()
    for record in records:
        sid = record.session_id
        rows = logs.get(sid, [])
        all_ids.update(r.id for r in rows)
        tally.events += len(rows)
        tally.turns += record.turns
        check_contiguous(tally, sid, rows, last_seqs.get(sid, -1))
        check_finish(tally, record, rows)
        check_tools(tally, sid, rows, read_executed(data_dir, sid))
        check_epochs(tally, sid, rows)
        visible = [r for r in rows if r.type not in INTERNAL_EVENT_TYPES]
        check_stream(tally, record, visible)
        listed = api_lists.get(sid)
        if listed is not None and listed != [r.id for r in visible]:
            tally.violate("api_list_mismatch", f"{sid}: events.list {len(listed)} vs {len(rows)}")
    for eid, count in all_ids.items():
        if count > 1:
            tally.violate("duplicate_event_id", f"{eid} x{count}")


def check_contiguous(tally: Tally, sid: str, rows: list[Row], last_seq: int) -> None:
    """seq is exactly 1..N and N is the session row's last_seq."""
    seqs = [r.seq for r in rows]
    if seqs != list(range(1, len(rows) + 1)) or last_seq != len(rows):
        tally.violate("log_not_contiguous", f"{sid}: {len(rows)} rows, last_seq {last_seq}")


def check_finish(tally: Tally, record: Record, rows: list[Row]) -> None:
    """Every turn the client played ended with end_turn, and so does the log."""
    sid = record.session_id
    if not record.finished:
        why = record.errors[-1] if record.errors else record.stream_broken or "deadline"
        tally.violate("unfinished", f"{sid}: after {record.turns} turns ({why})")
    bad = [r for r in record.stop_reasons if r != "end_turn"]
    if bad:
        tally.violate("turn_not_end_turn", f"{sid}: {bad}")
    idles = [r for r in rows if r.type == "session.status_idle"]
    last = idles[-1].body.get("stop_reason", {}).get("type") if idles else None
    if last != "end_turn":
        tally.violate("last_idle_not_end_turn", f"{sid}: {last}")
    if record.stream_broken and record.stream_broken != "stream ended":
        tally.violate("sse_broken", f"{sid}: {record.stream_broken}")


def read_executed(data_dir: Path, sid: str) -> Counter[str]:
    """How often each bash marker ran in the session's workspace."""
    path = data_dir / "sessions" / sid / "workspace" / "executed.log"
    if not path.exists():
        return Counter()
    return Counter(line.strip() for line in path.read_text().splitlines() if line.strip())


def check_tools(tally: Tally, sid: str, rows: list[Row], executed: Counter[str]) -> None:
    """No tool use twice in the log, none executed twice, every success really ran."""
    results: Counter[str] = Counter()
    result_of: dict[str, dict[str, Any]] = {}
    for row in rows:
        use_id = row.body.get("tool_use_id") or row.body.get("custom_tool_use_id")
        if use_id and row.type.endswith("tool_result"):
            results[use_id] += 1
            result_of[use_id] = row.body
    for use_id, count in results.items():
        if count > 1:
            tally.violate("tool_answered_twice", f"{sid}: {use_id} x{count}")
    marks: Counter[str] = Counter()
    for row in rows:
        if row.type == "agent.custom_tool_use":
            tally.custom_uses += 1
            marks[str(row.body.get("input", {}).get("key"))] += 1
        elif row.type == "agent.tool_use":
            mark = _bash_mark(row.body)
            marks[mark or row.id] += 1
            tally.bash_uses += 1
            _check_bash_result(tally, sid, mark, result_of.get(row.id), executed)
    for mark, count in marks.items():
        if count > 1:
            tally.violate("model_response_appended_twice", f"{sid}: {mark} x{count}")
    for mark, count in executed.items():
        tally.bash_executions += count
        if count > 1:
            tally.violate("tool_executed_twice", f"{sid}: {mark} x{count}")


def _bash_mark(body: dict[str, Any]) -> str | None:
    match = BASH_MARK.search(str((body.get("input") or {}).get("command", "")))
    return match.group(1) if match else None


def _check_bash_result(
    tally: Tally, sid: str, mark: str | None, result: dict[str, Any] | None, executed: Counter[str]
) -> None:
    if result is None:
        tally.violate("tool_use_unanswered", f"{sid}: {mark}")
        return
    text = " ".join(str(b.get("text", "")) for b in result.get("content") or [])
    ran = executed.get(mark or "", 0)
    if result.get("is_error") and INTERRUPTED in text:
        tally.interrupted += 1
        tally.interrupted_but_ran += 1 if ran else 0
    elif result.get("is_error"):
        tally.sandbox_errors += 1
    elif ran != 1:
        tally.violate("ok_result_but_not_run_once", f"{sid}: {mark} ran {ran}x")


def check_epochs(tally: Tally, sid: str, rows: list[Row]) -> None:
    """Brain appends in seq order never go back to an older lease, and one lease is one
    owner: otherwise two brains wrote to this session in the same stretch of the log."""
    highest = 0
    owners: dict[int, set[str]] = {}
    for row in rows:
        if row.token is None:
            continue
        owners.setdefault(row.token, set()).add(str(row.owner))
        if row.token < highest:
            tally.violate(
                "two_brains_interleaved",
                f"{sid}: seq {row.seq} {row.type} by token {row.token} after token {highest}",
            )
        highest = max(highest, row.token)
    for token, names in owners.items():
        if len(names) > 1:
            tally.violate("one_lease_two_owners", f"{sid}: token {token} by {sorted(names)}")


def check_stream(tally: Tally, record: Record, rows: list[Row]) -> None:
    """The stream saw exactly the log from its open position on: no gap, dup or reorder."""
    ids = [r.id for r in rows]
    seen = record.stream_ids
    first_user = next((i for i, r in enumerate(rows) if r.type == "user.message"), len(rows))
    start = ids.index(seen[0]) if seen and seen[0] in ids else -1
    if not seen or start < 0 or start > first_user or seen != ids[start:]:
        tally.violate(
            "sse_saw_other_than_log",
            f"{record.session_id}: stream {len(seen)} ids from {start}, log {len(ids)}",
        )


def scan_worker_logs(tally: Tally, paths: Iterable[Path]) -> None:
    """Fencing rejections, heartbeat losses and brain errors the workers logged.

    A LeaseLost that surfaces as "brain crashed" (wrapped in an exception group) is still a
    fencing rejection; it is counted apart because the brain should have handled it quietly.
    """
    for path in paths:
        for record in RECORD.split(path.read_text(errors="replace")):
            lease_lost = "LeaseLost" in record
            if APPEND_REJECTED.search(record):
                tally.append_rejections += 1
            elif HEARTBEAT_LOST.search(record):
                tally.heartbeat_losses += 1
            elif BRAIN_ERRORS.search(record) and lease_lost:
                tally.lease_lost_logged_as_crash += 1
            elif BRAIN_ERRORS.search(record):
                tally.brain_errors += 1
