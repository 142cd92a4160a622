"""The second act's scripted agents, one request at a time (the server run is in
test_demo_command): who plays which agent, and what each does with odd or partial input."""

from __future__ import annotations

from typing import Any

from corral.demo import team
from corral.demo.story import demo_story
from corral.models.base import ModelRequest
from corral.models.scripted import MODEL_NAME, Move, plan, read_turn

MEMORY = (
    "\n\n<memory>\nThese memory stores are mounted in your sandbox.\n"
    "- /mnt/memory/acme-sre-lessons (read_write): Acme SRE lessons\n</memory>"
)
TOOLS = ["bash", "read", "write", "glob", "corral_thread_start", "corral_thread_wait"]
POSTMORTEM = "# Post-mortem: 2 pages\n\nINC-1 checkout: caused by deploy a3f9c21 at 01:57.\n"


def request(system: str, messages: list[dict[str, Any]], tools: list[str]) -> ModelRequest:
    defs = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in tools]
    return ModelRequest(model=MODEL_NAME, system=system, messages=messages, tools=defs)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def called(name: str, tool_input: dict[str, Any], use_id: str) -> dict[str, Any]:
    block = {"type": "tool_use", "id": use_id, "name": name, "input": tool_input}
    return {"role": "assistant", "content": [{"type": "text", "text": "."}, block]}


def result(use_id: str, text: str, *extra: str) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": use_id,
        "content": [{"type": "text", "text": text}],
    }
    return {"role": "user", "content": [block, *({"type": "text", "text": t} for t in extra)]}


def reply(agent: str, text: str) -> str:
    return f"<thread-message from='sthr_{agent}' agent='{agent}'>\n{text}\n</thread-message>"


def lead_after_starts(*replies: str) -> list[dict[str, Any]]:
    return [
        user(team.COORDINATOR_PROMPT),
        called("read", {"file_path": "/mnt/session/uploads/postmortem.md"}, "r"),
        result("r", POSTMORTEM),
        called("corral_thread_start", {"agent": "log-analyst", "task": "t"}, "s1"),
        result("s1", "Started thread sthr_a (log-analyst)."),
        called("corral_thread_start", {"agent": "diff-reviewer", "task": "t"}, "s2"),
        result("s2", "Started thread sthr_b (diff-reviewer).", *replies),
    ]


def lead_move(messages: list[dict[str, Any]]) -> Move:
    return plan(request(team.COORDINATOR_SYSTEM + MEMORY, messages, TOOLS), demo_story)


def test_a_thread_reply_beside_a_tool_result_continues_the_turn() -> None:
    turn = read_turn(request("s", lead_after_starts(reply("log-analyst", "found it")), TOOLS))
    assert turn.prompt == team.COORDINATOR_PROMPT
    assert [c.name for c in turn.calls] == ["read", "corral_thread_start", "corral_thread_start"]
    assert turn.inputs == (reply("log-analyst", "found it"),)
    assert turn.system == "s"


def test_the_lead_starts_both_threads_on_the_commits_the_post_mortem_names() -> None:
    move = lead_move(lead_after_starts()[:3])
    assert [(n, i["agent"]) for n, i in move.calls] == [
        ("corral_thread_start", "log-analyst"),
        ("corral_thread_start", "diff-reviewer"),
    ]
    assert all("a3f9c21" in i["task"] for _, i in move.calls)


def test_the_lead_waits_for_every_thread_then_saves_the_lessons() -> None:
    one = lead_move(lead_after_starts(reply("log-analyst", "- Lesson: watch the pool")))
    assert one.calls == (("corral_thread_wait", {}),) and "diff-reviewer" in one.text
    both = lead_move(
        lead_after_starts(
            reply("log-analyst", "- Lesson: watch the pool"),
            reply("diff-reviewer", "[corral-scripted] ok\n- Lesson: batch queries"),
        )
    )
    [(name, write)] = both.calls
    assert name == "write"
    assert write["file_path"] == "/mnt/memory/acme-sre-lessons/incidents/INC-1.md"
    assert "- Lesson: watch the pool\n- Lesson: batch queries" in write["content"]
    assert "[corral-scripted]" not in write["content"]


def test_a_post_mortem_without_a_deploy_starts_no_thread() -> None:
    messages = lead_after_starts()[:2] + [result("r", "# Post-mortem\n\nNo idea.")]
    move = lead_move(messages)
    assert move.calls == () and "names no responsible deploy" in move.text


def test_the_reviewer_is_not_taken_for_the_incident_commander() -> None:
    task = reply(
        "the coordinator", "Review the diffs of a3f9c21 and c81d4e7: which caused the pages?"
    )
    move = plan(
        request(
            team.REVIEWER_SYSTEM, [user(task)], ["bash", "write", "get_diff", "list_incidents"]
        ),
        demo_story,
    )
    assert move.calls == (("get_diff", {"commit": "a3f9c21"}), ("get_diff", {"commit": "c81d4e7"}))


def test_the_advisor_says_when_the_memory_holds_nothing() -> None:
    system = team.ADVISOR_SYSTEM + MEMORY.replace("read_write", "read_only")
    messages = [
        user(team.ADVISOR_PROMPT),
        called("glob", {"pattern": "**/*.md", "path": "/mnt/memory/acme-sre-lessons"}, "g"),
        result("g", "no matches"),
    ]
    move = plan(request(system, messages, ["glob", "read"]), demo_story)
    assert move.calls == () and "holds no lessons yet" in move.text


def test_other_agents_are_left_to_the_incident_story_or_the_echo() -> None:
    move = plan(request("You are helpful.", [user("hello")], ["bash"]), demo_story)
    assert move.calls == () and "You said" in move.text
