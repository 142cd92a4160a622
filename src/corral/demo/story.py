"""The demo's incident-triage story for `corral-scripted`: a pure function from a turn to a move.

Every conclusion is computed from tool results already in the conversation (the demo tools' JSON,
bash output), never hard-coded; it performs no I/O and keeps no state between calls.
"""

from __future__ import annotations

import re
from typing import Any

from corral.demo.evidence import (
    CUSTOM_TOOLS,
    Facts,
    Finding,
    diagnose,
    errors,
    gather,
    hhmm,
    short_time,
)
from corral.demo.team_story import team_story
from corral.models.scripted import LABEL, Move, Turn

RUNBOOK_PATH = "/mnt/skills/incident-triage-runbook/SKILL.md"
LOG_PATH = "/mnt/session/uploads/app.log"
POSTMORTEM_PATH = "/mnt/session/outputs/postmortem.md"
_INCIDENT_WORDS = re.compile(
    r"\b(incidents?|pages?|paged|outages?|alerts?|on-?call|triage|root causes?|causes?)\b", re.I
)
_POOL = "connection pool exhausted"

__all__ = ["demo_story", "incident_story", "is_incident_story", "next_move"]


def demo_story(turn: Turn) -> Move | None:
    """Both acts of the demo: the second act's agents first (one of them has the demo's
    custom tools and an incident-sounding task, so the incident story would claim it)."""
    return team_story(turn) or incident_story(turn)


def incident_story(turn: Turn) -> Move | None:
    """The story as a `ScriptedModel` story: the next move, or None when it does not apply."""
    return next_move(turn) if is_incident_story(turn) else None


def is_incident_story(turn: Turn) -> bool:
    """The story plays when the demo tools are offered and the prompt asks about pages."""
    return bool(turn.tools & set(CUSTOM_TOOLS)) and bool(_INCIDENT_WORDS.search(turn.prompt))


def next_move(turn: Turn) -> Move:
    """Runbook, triage, evidence, log check, post-mortem, diagnosis: skipping what's unavailable."""
    try:
        return _next_move(turn)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # A model answers rather than crashing the brain: odd tool results end the turn politely.
        return Move(
            text=f"{LABEL} Scripted demo model: a tool result had a shape I cannot read "
            f"({exc!r}), so I am stopping here."
        )


def _next_move(turn: Turn) -> Move:
    facts = gather(turn.calls)
    findings = diagnose(facts)
    notes = " ".join(f"Note: {e} - continuing without it." for e in errors(turn.last))
    for step in (_runbook, _triage, _evidence, _log_check, _write):
        move = step(turn, facts, findings)
        if move is not None:
            return Move(text=f"{notes} {move.text}".strip(), calls=move.calls)
    wrote = any(c.name == "write" and c.result is not None and not c.is_error for c in turn.calls)
    return Move(text=_diagnosis(facts, findings, wrote=wrote))


# --- the steps -----------------------------------------------------------------------------

Step = Move | None


def _called(turn: Turn, name: str, **match: Any) -> bool:
    return any(
        c.name == name and all(c.input.get(k) == v for k, v in match.items()) for c in turn.calls
    )


def _runbook(turn: Turn, facts: Facts, findings: list[Finding]) -> Step:
    if "read" not in turn.tools or _called(turn, "read"):
        return None
    return Move(
        text="First, the incident-triage runbook.", calls=(("read", {"file_path": RUNBOOK_PATH}),)
    )


def _triage(turn: Turn, facts: Facts, findings: list[Finding]) -> Step:
    wanted: tuple[tuple[str, dict[str, Any]], ...] = (
        ("list_incidents", {}),
        ("get_recent_deploys", {"hours": 24}),
        ("get_metrics", {}),
    )
    calls = tuple(c for c in wanted if c[0] in turn.tools)
    if not calls or any(_called(turn, name) for name, _ in calls):
        return None
    return Move(
        text="Pages that fire close together often share a cause. Pulling the open "
        "incidents, the last 24 h of deploys and a metrics overview in parallel, "
        "deploys before logs.",
        calls=calls,
    )


def _evidence(turn: Turn, facts: Facts, findings: list[Finding]) -> Step:
    calls: list[tuple[str, dict[str, Any]]] = []
    if "get_metrics" in turn.tools:
        calls += [
            ("get_metrics", {"service": s})
            for s in dict.fromkeys(i["service"] for i in facts.incidents)
            if not _called(turn, "get_metrics", service=s)
        ]
    suspects = [f for f in findings if f.deploy is not None]
    if "get_diff" in turn.tools:
        calls += [
            ("get_diff", {"commit": f.deploy["commit"]})
            for f in suspects
            if f.deploy and not _called(turn, "get_diff", commit=f.deploy["commit"])
        ]
    if not calls:
        return None
    named = [
        f"{f.deploy['commit']} ({f.incident['service']}, {hhmm(f.deploy['deployed_at'])})"
        for f in suspects
        if f.deploy
    ]
    quiet = [f.incident["service"] for f in findings if f.deploy is None]
    text = f"{len(facts.incidents)} open pages. Deploys shortly before them: "
    text += (", ".join(named) or "none") + "."
    if quiet:
        text += f" No deploy for {', '.join(quiet)} since {short_time(facts.since)}."
    return Move(
        text=text + " Pulling per-service metrics and the suspicious diffs.", calls=tuple(calls)
    )


def _log_commands(findings: list[Finding]) -> list[tuple[str, str | None, str]]:
    """(pattern, service or None, command) triples that check the findings against app.log."""
    commands: list[tuple[str, str | None, str]] = []
    if any(f.diff_kind == "n+1" or f.kind == "symptom" for f in findings):
        commands.append((_POOL, None, f"grep -c '{_POOL}' {LOG_PATH}"))
    if any(f.diff_kind == "cache" for f in findings):
        commands.append(("cache miss", None, f"grep -c 'cache miss' {LOG_PATH}"))
    for f in findings:
        if f.kind == "symptom":
            service = f.incident["service"]
            commands.append(
                (_POOL, service, f"grep '{_POOL}' {LOG_PATH} | grep -c 'svc={service}'")
            )
    return commands


def _log_check(turn: Turn, facts: Facts, findings: list[Finding]) -> Step:
    commands = _log_commands(findings)
    if "bash" not in turn.tools or _called(turn, "bash") or not commands:
        return None
    causes = {f.deploy["commit"] for f in findings if f.deploy}
    return Move(
        text=f"Metrics and diffs point to {len(causes)} causes for {len(findings)} pages."
        " Confirming in app.log with grep counts (never reading the whole file).",
        calls=tuple(("bash", {"command": cmd}) for _, _, cmd in commands),
    )


def _write(turn: Turn, facts: Facts, findings: list[Finding]) -> Step:
    if "write" not in turn.tools or _called(turn, "write") or not findings:
        return None
    body = (
        "# Post-mortem: "
        + _summary(findings)
        + "\n\n"
        + "\n".join(
            f"## {f.incident['id']} {f.incident['service']}\n\n{_explain(f)}\n" for f in findings
        )
    )
    body += f"\n## Evidence from app.log\n\n{_log_line(facts, findings) or 'Not checked.'}\n"
    body += "\n## Follow-up\n\n"
    body += _next_steps(findings) + "\n\n_Written by corral-scripted, a scripted demo model._\n"
    return Move(
        text="Writing the post-mortem.",
        calls=(("write", {"file_path": POSTMORTEM_PATH, "content": body}),),
    )


# --- the final message ---------------------------------------------------------------------


def _summary(findings: list[Finding]) -> str:
    causes = {f.deploy["commit"] for f in findings if f.deploy}
    return f"{len(findings)} pages, {len(causes)} root causes"


def _explain(f: Finding) -> str:
    inc = f.incident
    head = f'{inc["id"]} {inc["service"]} ("{inc["title"]}", paged {hhmm(inc["opened_at"])})'
    if f.kind == "deploy" and f.deploy:
        return (
            f"{head}: caused by deploy {f.deploy['commit']} at {hhmm(f.deploy['deployed_at'])}"
            f' ("{f.deploy["title"]}"); {f.cause}. Metrics: {f.evidence}.'
        )
    if f.kind == "symptom":
        return (
            f"{head}: {f.cause}. {inc['service'].capitalize()} is a symptom of {f.culprit} "
            f"saturating the shared database: {f.evidence}."
        )
    return f"{head}: cause unknown ({f.cause})."


def _log_line(facts: Facts, findings: list[Finding]) -> str:
    totals: dict[str, str] = {}
    for pattern, service, command in _log_commands(findings):
        count = facts.counts.get(command)
        if count is None or (service is not None and pattern not in totals):
            continue
        if service is None:
            totals[pattern] = f'{count:,} "{pattern}" lines'
        else:
            totals[pattern] += f" ({count:,} from {service})"
    return ("app.log: " + ", ".join(totals.values()) + ".") if totals else ""


def _next_steps(findings: list[Finding]) -> str:
    steps = []
    for f in findings:
        if f.kind != "deploy" or f.deploy is None:
            continue
        cleared = [s.incident["service"] for s in findings if s.culprit == f.incident["service"]]
        also = f" (also clears {', '.join(cleared)})" if cleared else ""
        steps.append((not cleared, f"roll back {f.deploy['commit']}{also}"))
    ordered = [text for _, text in sorted(steps, key=lambda step: step[0])]
    return ("Next: " + ", then ".join(ordered) + ".") if ordered else "Next: keep investigating."


def _diagnosis(facts: Facts, findings: list[Finding], *, wrote: bool) -> str:
    if not findings:
        problem = "; ".join(facts.errors) or "no open incidents were found"
        return f"{LABEL} Scripted demo model: I could not diagnose the pages ({problem})."
    lines = [
        f"{LABEL} Diagnosis from the scripted demo model (deterministic, not an LLM): "
        f"{_summary(findings)}.",
        "",
    ]
    lines += [f"- {_explain(f)}" for f in findings]
    lines += ["", *filter(None, [_log_line(facts, findings)]), _next_steps(findings)]
    if wrote:
        lines.append(f"Post-mortem written to {POSTMORTEM_PATH}.")
    if facts.errors:
        lines.append("Tool errors along the way: " + "; ".join(facts.errors) + ".")
    return "\n".join(lines)
