"""The second act for `corral-scripted`: the post-mortem lead and the change advisor.

The lead reads the first act's post-mortem, starts the log analyst and the diff reviewer on
child threads (their scripts are in `team_workers`), waits for both replies and saves the
lessons to the memory store; the advisor, in a later session, reads them back. Each agent is
told apart by the role line its system prompt opens with (`team`); every move is computed
from the request alone, so a repeated request gets the same move.
"""

from __future__ import annotations

import re

from corral.demo.team import (
    ADVISOR_ROLE,
    ANALYST_ROLE,
    COORDINATOR_ROLE,
    DIFF_REVIEWER,
    FOLLOWUP_DIR,
    LOG_ANALYST,
    POSTMORTEM_MOUNT,
    REVIEWER_ROLE,
)
from corral.demo.team_workers import analyst_move, reviewer_move
from corral.models.scripted import LABEL, Call, Move, Turn

START_TOOL = "corral_thread_start"
WAIT_TOOL = "corral_thread_wait"
UPLOADS = "/mnt/session/uploads"
_MAX_WAITS = 6
_LESSON = re.compile(r"^\s*(?:\d+\s+)?(- Lesson: .+?)\s*$", re.M)
_REPLY = re.compile(
    r"<thread-message from=['\"][^'\"]*['\"] agent=['\"]([^'\"]*)['\"]>\n(.*?)\n</thread-message>",
    re.S,
)

__all__ = ["lesson_lines", "memory_mount", "team_story"]


def team_story(turn: Turn) -> Move | None:
    """The move of whichever second-act agent this is, or None for any other agent."""
    roles = (
        (COORDINATOR_ROLE, _lead),
        (ANALYST_ROLE, analyst_move),
        (REVIEWER_ROLE, reviewer_move),
        (ADVISOR_ROLE, _advisor),
    )
    for role, script in roles:
        if turn.system.startswith(role):
            try:
                return script(turn)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                return Move(text=f"{LABEL} Scripted demo model: I cannot read a result ({exc!r}).")
    return None


def memory_mount(system: str, access: str | None = None) -> str | None:
    """The first memory store mounted per the system prompt's <memory> section."""
    wanted = re.escape(access) if access else r"read_\w+"
    found = re.search(rf"^- (/mnt/memory/[a-z0-9-]+) \({wanted}\)", system, re.M)
    return found.group(1) if found else None


def lesson_lines(text: str) -> list[str]:
    """The `- Lesson: ...` lines of a text (a numbered `read` output counts too)."""
    return [m.group(1) for m in _LESSON.finditer(text)]


def _done(turn: Turn, name: str) -> list[Call]:
    return [c for c in turn.calls if c.name == name and c.result is not None]


def _upload(prompt: str, suffix: str, default: str) -> str:
    found = re.search(rf"{UPLOADS}/[\w.-]+\{suffix}\b", prompt)
    return found.group() if found else f"{UPLOADS}/{default}"


# --- the post-mortem lead (coordinator) ----------------------------------------------------


def _lead(turn: Turn) -> Move:
    mount = memory_mount(turn.system, "read_write")
    reads = _done(turn, "read")
    if not reads:
        return _lead_reads(turn, mount)
    postmortem = "" if reads[0].is_error else reads[0].result or ""
    commits = list(dict.fromkeys(re.findall(r"deploy ([0-9a-f]{7,40})\b", postmortem)))
    starts = _done(turn, START_TOOL)
    if not starts:
        if not commits:
            return Move(
                text=f"{LABEL} Scripted demo model: the post-mortem names no responsible "
                "deploy, so there is nothing to follow up."
            )
        return _lead_starts(turn, commits)
    started = [c for c in starts if not c.is_error]
    replies = _replies(turn.inputs)
    if len(replies) < len(started) and len(_done(turn, WAIT_TOOL)) < _MAX_WAITS:
        waiting = ", ".join(n for n in (LOG_ANALYST, DIFF_REVIEWER) if n not in replies)
        return Move(text=f"Waiting for {waiting}.", calls=((WAIT_TOOL, {}),))
    writes = _done(turn, "write")
    if not writes and mount is not None and replies:
        return _lead_saves(mount, postmortem, commits, replies)
    return Move(text=_lead_summary(replies, writes))


def _lead_reads(turn: Turn, mount: str | None) -> Move:
    calls: list[tuple[str, dict[str, object]]] = [
        ("read", {"file_path": _upload(turn.prompt, ".md", POSTMORTEM_MOUNT)})
    ]
    if mount is not None:
        calls.append(("glob", {"pattern": "**/*.md", "path": mount}))
    return Move(
        text="Reading the post-mortem, and what the team memory already holds.",
        calls=tuple(calls),
    )


def _lead_starts(turn: Turn, commits: list[str]) -> Move:
    log = _upload(turn.prompt, ".log", "app.log")
    named = " and ".join(commits)
    analyst_task = (
        f"Post-mortem follow-up. In {log}, build the failure's timeline: when the deploys "
        f"{named} finished, when 'connection pool exhausted' errors started in each service "
        "and how many there were, and how 'cache miss' lines per 10 minutes changed around "
        f"the deploys. Use grep/awk counts only. Write {FOLLOWUP_DIR}/log-timeline.md and "
        "reply with a summary ending in '- Lesson:' lines."
    )
    reviewer_task = (
        f"Post-mortem follow-up. Review the diffs of {named} (get_diff): what in each change "
        "caused last night's pages, and what review or test should have caught it. Write "
        f"{FOLLOWUP_DIR}/diff-review.md and reply with one '- Lesson:' line per commit."
    )
    return Move(
        text=f"The post-mortem blames {named}. Starting the log analyst and the diff reviewer "
        "in parallel.",
        calls=(
            (START_TOOL, {"agent": LOG_ANALYST, "task": analyst_task}),
            (START_TOOL, {"agent": DIFF_REVIEWER, "task": reviewer_task}),
        ),
    )


def _replies(inputs: tuple[str, ...]) -> dict[str, str]:
    """Each thread's newest reply, by agent name, without the scripted label."""
    replies: dict[str, str] = {}
    for text in inputs:
        for agent, body in _REPLY.findall(text):
            replies[agent] = body.replace(LABEL, "").strip()
    return replies


def _lead_saves(mount: str, postmortem: str, commits: list[str], replies: dict[str, str]) -> Move:
    incidents = list(dict.fromkeys(re.findall(r"\bINC-\d+\b", postmortem)))
    name = "-".join(dict.fromkeys([incidents[0], incidents[-1]])) if incidents else "incident"
    title = next((ln[2:] for ln in postmortem.splitlines() if ln.startswith("# ")), "Incident")
    lessons = [lesson for body in replies.values() for lesson in lesson_lines(body)]
    body = f"# Lessons: {title} ({', '.join(incidents) or 'no incident ids'})\n\n"
    body += f"Responsible deploys: {', '.join(commits)}.\n\n## Lessons\n\n"
    body += "\n".join(lessons or ["- Lesson: (the threads reported none)"]) + "\n"
    for agent, reply in sorted(replies.items()):
        details = "\n".join(ln for ln in reply.splitlines() if ln.strip() not in lessons)
        body += f"\n## From {agent}\n\n{details.strip()}\n"
    body += "\n_Saved by corral-scripted, a scripted demo model._\n"
    return Move(
        text=f"Both threads replied. Saving {len(lessons)} lessons to the team memory.",
        calls=(("write", {"file_path": f"{mount}/incidents/{name}.md", "content": body}),),
    )


def _lead_summary(replies: dict[str, str], writes: list[Call]) -> str:
    lines = [
        f"{LABEL} Follow-up by the scripted demo model (deterministic, not an LLM): "
        f"{len(replies)} threads replied ({', '.join(sorted(replies)) or 'none'})."
    ]
    saved = [c for c in writes if not c.is_error]
    if saved:
        path = str(saved[0].input.get("file_path"))
        lessons = lesson_lines(str(saved[0].input.get("content", "")))
        lines += [f"Saved {len(lessons)} lessons to {path}:", *lessons]
        lines.append("Sessions that mount this memory store later will find them there.")
    elif writes:
        lines.append(f"Saving the lessons failed: {writes[0].result}")
    else:
        lines.append("Nothing was saved: no memory store is mounted read_write, or no replies.")
    return "\n".join(lines)


# --- the change advisor (a later session, same memory store) -------------------------------

_TOPICS = ("cache", "loop", "batch", "pool", "flag")


def _advisor(turn: Turn) -> Move:
    mount = memory_mount(turn.system)
    if mount is None:
        return Move(text=f"{LABEL} Scripted demo model: no memory store is mounted.")
    globs, reads = _done(turn, "glob"), _done(turn, "read")
    if not globs:
        return Move(
            text="Checking the team memory for lessons from past incidents.",
            calls=(("glob", {"pattern": "**/*.md", "path": mount}),),
        )
    files = sorted(set(re.findall(rf"{re.escape(mount)}/\S+?\.md\b", globs[0].result or "")))
    if files and not reads:
        return Move(
            text=f"Reading {len(files)} file(s) of lessons.",
            calls=tuple(("read", {"file_path": f}) for f in files[:5]),
        )
    return Move(text=_advice(turn.prompt, reads))


def _advice(prompt: str, reads: list[Call]) -> str:
    found = [(str(c.input.get("file_path")), lesson_lines(c.result or "")) for c in reads]
    lessons = [(path, lesson) for path, lines in found for lesson in lines]
    if not lessons:
        return f"{LABEL} Scripted demo model: the team memory holds no lessons yet."
    asked = {t for t in _TOPICS if t in prompt.lower()}
    applies = [(p, x) for p, x in lessons if asked & {t for t in _TOPICS if t in x.lower()}]
    others = [pair for pair in lessons if pair not in applies]
    lines = [f"{LABEL} From the team memory (scripted demo model, quoting what it read):"]
    if applies:
        lines.append("Applies to these changes:")
        lines += [f"{lesson} ({path})" for path, lesson in applies]
    if others:
        lines.append("Also on record:")
        lines += [f"{lesson} ({path})" for path, lesson in others]
    verdict = "Do not approve as is" if applies else "No recorded lesson matches"
    lines.append(f"{verdict}: past incidents say what to check first.")
    return "\n".join(lines)
