"""The scripted model plays the incident story end to end, in process, against generated data.

The loop stands in for the brain: stream a response, run its tool calls (custom tools through
`handle_tool`, sandbox tools against the data directory), append the results, repeat.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from corral.demo.data import CULPRIT_COMMITS, generate
from corral.demo.story import LOG_PATH, POSTMORTEM_PATH, RUNBOOK_PATH, incident_story
from corral.demo.tools import handle_tool, is_error_result, tool_definitions
from corral.models.base import ModelRequest, ModelResponse, ModelStreamEvent, TextDelta
from corral.models.scripted import MODEL_NAME, ScriptedModel, text_chunks, tool_use_id

PROMPT = (
    "Three pages fired in the last 30 minutes (inventory, checkout, cart). "
    "Investigate and find the causes."
)
SANDBOX_TOOLS = [
    {"name": name, "description": name, "input_schema": {"type": "object"}}
    for name in ("bash", "read", "write", "edit", "glob", "grep")
]


@dataclass
class Played:
    """Everything one conversation produced."""

    responses: list[ModelResponse] = field(default_factory=list)
    deltas: list[list[TextDelta]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    @property
    def final_text(self) -> str:
        return str(self.responses[-1].content[0]["text"])

    def tool_uses(self, turn: int) -> list[dict[str, Any]]:
        return [b for b in self.responses[turn].content if b["type"] == "tool_use"]


def collect(model: ScriptedModel, request: ModelRequest) -> list[ModelStreamEvent]:
    async def run() -> list[ModelStreamEvent]:
        return [event async for event in model.stream(request)]

    return anyio.run(run)


def request_for(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(
        model=MODEL_NAME, system="You are an SRE.", messages=list(messages), tools=tools
    )


def run_tool(data: Path, played: Played, name: str, tool_input: dict[str, Any]) -> tuple[str, bool]:
    if name == "read":
        path = Path(tool_input["file_path"].replace("/mnt/skills/", f"{data}/skills/"))
        return (path.read_text(), False) if path.exists() else (f"no such file {path}", True)
    if name == "bash":
        command = tool_input["command"].replace(LOG_PATH, str(data / "app.log"))
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
        return done.stdout + done.stderr, done.returncode != 0
    if name == "write":
        played.outputs[tool_input["file_path"]] = tool_input["content"]
        return f"wrote {len(tool_input['content'])} bytes to {tool_input['file_path']}", False
    text = handle_tool(data, name, tool_input)
    return text, is_error_result(text)


def play(
    data: Path,
    tools: list[dict[str, Any]],
    *,
    prompt: str = PROMPT,
    breaks: frozenset[str] = frozenset(),
) -> Played:
    """Run the conversation to end_turn; calls to tools in `breaks` fail."""
    model, played = ScriptedModel(story=incident_story), Played()
    played.messages.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
    for _ in range(12):
        events = collect(model, request_for(played.messages, tools))
        response = events[-1]
        assert isinstance(response, ModelResponse)
        played.responses.append(response)
        played.deltas.append([e for e in events if isinstance(e, TextDelta)])
        played.messages.append({"role": "assistant", "content": response.content})
        if response.stop_reason == "end_turn":
            return played
        results = []
        for block in response.content:
            if block["type"] != "tool_use":
                continue
            text, is_error = (
                ("tool unavailable: connection reset", True)
                if block["name"] in breaks
                else run_tool(data, played, block["name"], block["input"])
            )
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block["id"],
                    "content": [{"type": "text", "text": text}],
                    "is_error": is_error,
                }
            )
        played.messages.append({"role": "user", "content": results})
    raise AssertionError("the scripted story did not end within 12 turns")


def test_turn_one_asks_for_three_tools_in_parallel(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions())
    first = played.tool_uses(0)
    assert [b["name"] for b in first] == ["list_incidents", "get_recent_deploys", "get_metrics"]
    assert played.responses[0].stop_reason == "tool_use"
    assert len({b["id"] for b in first}) == 3
    assert all(b["id"].startswith("toolu_") for b in first)


def test_second_turn_picks_services_and_commits_from_the_results(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions())
    second = [(b["name"], b["input"]) for b in played.tool_uses(1)]
    assert ("get_metrics", {"service": "cart"}) in second
    diffs = {i["commit"] for name, i in second if name == "get_diff"}
    assert diffs == set(CULPRIT_COMMITS.values())


def test_final_answer_names_both_commits_and_cart_as_symptom(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions())
    final = played.final_text
    assert played.responses[-1].stop_reason == "end_turn"
    assert final.startswith("[corral-scripted]")
    assert "scripted demo model" in final
    assert "a3f9c21" in final and "c81d4e7" in final
    cart_line = next(line for line in final.splitlines() if "INC-2277 cart" in line)
    assert "symptom of checkout" in cart_line
    assert "N+1" in final
    assert "7d2e6b0" not in final and "5be01a9" not in final  # harmless deploys stay out
    assert len(played.responses) == 3


def test_answer_follows_the_data_not_a_script(tmp_path: Path, demo_data: Path) -> None:
    """Rename the culprit commit in the data: the answer names the new hash."""
    data = generate(tmp_path / "data", log_lines=2_000)
    deploys = json.loads((data.root / "deploys.json").read_text())
    for deploy in deploys["deploys"]:
        if deploy["commit"] == "a3f9c21":
            deploy["commit"] = "feed123"
    (data.root / "deploys.json").write_text(json.dumps(deploys))
    (data.root / "diffs" / "a3f9c21.diff").rename(data.root / "diffs" / "feed123.diff")
    final = play(data.root, tool_definitions()).final_text
    assert "feed123" in final and "a3f9c21" not in final


def test_text_streams_as_word_chunks_then_one_response(demo_data: Path) -> None:
    events = collect(
        ScriptedModel(story=incident_story), request_for([{"role": "user", "content": PROMPT}], [])
    )
    *deltas, response = events
    assert isinstance(response, ModelResponse)
    assert len(deltas) > 1 and all(isinstance(d, TextDelta) and d.index == 0 for d in deltas)
    assert (
        "".join(d.text for d in deltas if isinstance(d, TextDelta)) == response.content[0]["text"]
    )
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


def test_usage_is_roughly_a_quarter_of_the_characters(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions())
    last = played.responses[-1]
    assert last.usage.output_tokens == pytest.approx(len(json.dumps(last.content)) / 4, abs=1)
    assert played.responses[2].usage.input_tokens > played.responses[0].usage.input_tokens


def test_identical_requests_give_identical_responses(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions())
    request = request_for(played.messages[:3], tool_definitions())
    first, again = (
        collect(ScriptedModel(story=incident_story), request),
        collect(ScriptedModel(story=incident_story), request),
    )
    assert first == again
    assert isinstance(first[-1], ModelResponse)
    ids = [b["id"] for b in first[-1].content if b["type"] == "tool_use"]
    assert ids == [tool_use_id(request, i) for i in range(len(ids))]
    assert ids == [b["id"] for b in played.tool_uses(1)]


def test_with_sandbox_tools_it_reads_the_runbook_greps_and_writes(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions() + SANDBOX_TOOLS)
    assert [(b["name"], b["input"]) for b in played.tool_uses(0)] == [
        ("read", {"file_path": RUNBOOK_PATH})
    ]
    assert [b["name"] for b in played.tool_uses(1)][0] == "list_incidents"
    greps = [
        b["input"]["command"]
        for r in range(len(played.responses))
        for b in played.tool_uses(r)
        if b["name"] == "bash"
    ]
    assert greps and all("grep -c" in g and LOG_PATH in g for g in greps)
    postmortem = played.outputs[POSTMORTEM_PATH]
    assert "a3f9c21" in postmortem and "c81d4e7" in postmortem
    final = played.final_text
    assert "connection pool exhausted" in final and POSTMORTEM_PATH in final
    log = (demo_data / "app.log").read_text()
    assert f"{log.count('connection pool exhausted'):,}" in final


def test_without_sandbox_tools_it_skips_runbook_grep_and_write(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions())
    names = {b["name"] for r in range(len(played.responses)) for b in played.tool_uses(r)}
    assert names <= {"list_incidents", "get_recent_deploys", "get_metrics", "get_diff"}
    assert not played.outputs


def test_tool_errors_are_reported_and_the_story_continues(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions(), breaks=frozenset({"get_diff"}))
    after_error = str(played.responses[2].content[0]["text"])
    assert "get_diff failed" in after_error
    final = played.final_text
    assert "a3f9c21" in final and "c81d4e7" in final
    assert "could not read its diff" in final and "Tool errors along the way" in final


def test_missing_runbook_is_an_error_it_mentions(tmp_path: Path, demo_data: Path) -> None:
    played = play(tmp_path, tool_definitions() + SANDBOX_TOOLS)  # no data at all
    assert "read failed" in str(played.responses[1].content[0]["text"])
    assert played.final_text.startswith("[corral-scripted]")
    assert "could not diagnose" in played.final_text


def test_a_plain_hello_gets_a_short_scripted_echo(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions(), prompt="hello")
    assert len(played.responses) == 1
    assert played.final_text.startswith('[corral-scripted] You said: "hello"')
    assert not played.tool_uses(0)


def test_a_new_prompt_after_the_story_starts_a_new_turn(demo_data: Path) -> None:
    played = play(demo_data, tool_definitions())
    messages = [*played.messages, {"role": "user", "content": "thanks!"}]
    events = collect(ScriptedModel(story=incident_story), request_for(messages, tool_definitions()))
    assert isinstance(events[-1], ModelResponse)
    assert events[-1].stop_reason == "end_turn"
    assert "thanks!" in events[-1].content[0]["text"]


def test_text_chunks_reassemble_exactly() -> None:
    text = "  Three pages,\n\ntwo causes:  a3f9c21 and c81d4e7. "
    chunks = text_chunks(text, 2)
    assert "".join(chunks) == text and len(chunks) == 4


def test_generated_data_has_the_expected_size_and_is_deterministic(tmp_path: Path) -> None:
    first, second = generate(tmp_path / "a"), generate(tmp_path / "b")
    assert first.log_lines == 74_164
    assert first.log_path.read_bytes().count(b"\n") == 74_164
    assert first.log_bytes == first.log_path.stat().st_size
    assert 14_000_000 <= first.log_bytes <= 18_000_000

    def digest(root: Path) -> dict[str, str]:
        return {
            str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))
            if p.is_file()
        }

    assert digest(first.root) == digest(second.root)
    assert digest(generate(tmp_path / "c", seed=7).root) != digest(first.root)


def test_the_log_carries_the_tell_tale_lines(demo_data: Path) -> None:
    log = (demo_data / "app.log").read_text()
    assert "commit=c81d4e7" in log and "commit=a3f9c21" in log
    assert log.count("connection pool exhausted") > 500
    assert log.count("product cache miss") > 1_000
    assert "WHERE order_id = $1" in log


def test_tools_answer_bad_input_with_clear_errors(demo_data: Path) -> None:
    def error(name: str, tool_input: dict[str, Any]) -> str:
        text = handle_tool(demo_data, name, tool_input)
        assert is_error_result(text)
        return str(json.loads(text)["error"])

    assert "known services" in error("get_metrics", {"service": "billing"})
    assert "integer" in error("get_recent_deploys", {"hours": "lots"})
    assert "hex hash" in error("get_diff", {"commit": "HEAD; rm -rf /"})
    assert "deployed commits" in error("get_diff", {"commit": "0123456"})
    assert "unknown tool" in error("get_weather", {})
    assert "status" in error("list_incidents", {"status": "closed"})


def test_tools_serve_the_story(demo_data: Path) -> None:
    incidents = json.loads(handle_tool(demo_data, "list_incidents", {}))["incidents"]
    assert [i["id"] for i in incidents] == ["INC-2275", "INC-2276", "INC-2277"]
    deploys = json.loads(handle_tool(demo_data, "get_recent_deploys", {"hours": 24}))["deploys"]
    assert "cart" not in {d["service"] for d in deploys}
    assert {"c81d4e7", "a3f9c21"} <= {d["commit"] for d in deploys}
    checkout = json.loads(handle_tool(demo_data, "get_metrics", {"service": "checkout"}))
    assert max(checkout["database"]["in_use"]) == checkout["database"]["max_connections"]
    short = json.loads(handle_tool(demo_data, "get_metrics", {"service": "cart", "minutes": 30}))
    assert len(short["series"]["error_rate_pct"]) == 16
    diff = json.loads(handle_tool(demo_data, "get_diff", {"commit": "a3f9c21"}))
    assert "for order_id in order_ids:" in diff["diff"] and diff["deploy"]["service"] == "checkout"


def test_a_zero_grep_count_is_a_count_not_an_error(tmp_path: Path) -> None:
    data = generate(tmp_path / "quiet", log_lines=300)
    data.log_path.write_text('2026-04-22T00:00:00.000Z INFO  svc=cart msg="all quiet"\n')
    played = play(data.root, tool_definitions() + SANDBOX_TOOLS)
    final = played.final_text
    assert '0 "connection pool exhausted" lines (0 from cart)' in final
    assert "Tool errors" not in final


def test_malformed_tool_results_end_the_turn_politely() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": PROMPT},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "list_incidents", "input": {}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_recent_deploys", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": '{"incidents": [{"id": "INC-1", "service": "cart"}]}',
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": '{"since": "yesterday", "deploys": []}',
                },
            ],
        },
    ]
    events = collect(ScriptedModel(story=incident_story), request_for(messages, tool_definitions()))
    response = events[-1]
    assert isinstance(response, ModelResponse) and response.stop_reason == "end_turn"
    assert response.content[0]["text"].startswith("[corral-scripted]")
    assert "cannot read" in response.content[0]["text"]
