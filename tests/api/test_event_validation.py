"""Answers to tool uses are validated atomically and cumulatively, through the SDK.

Each item of a POST is checked against the session with the earlier items applied, inside the
append's transaction: a POST is all-or-nothing, a duplicate answer inside one POST is a 400,
and of two concurrent answers to one call exactly one wins (the other is a non-retryable 409).
"""

from __future__ import annotations

import threading
from typing import Any

import anthropic
import pytest

from tests.api.helpers import LOOKUP, assert_log_sound, events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, ToolUse, Turn
from tests.server import ServerProcess

ASK_BASH = {
    "type": "agent_toolset_20260401",
    "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
}
RACES = 12
"""Concurrent answer pairs per call kind and backend."""


def confirm(use_id: str, result: str, **fields: Any) -> dict[str, Any]:
    """A user.tool_confirmation."""
    return {"type": "user.tool_confirmation", "tool_use_id": use_id, "result": result, **fields}


def custom_result(use_id: str, text: str) -> dict[str, Any]:
    """A user.custom_tool_result with one text block."""
    return {
        "type": "user.custom_tool_result",
        "custom_tool_use_id": use_id,
        "content": [{"type": "text", "text": text}],
    }


def waiting_session(
    client: anthropic.Anthropic, fake_model: FakeModelServer, *, ask: bool, calls: int
) -> tuple[str, list[Any]]:
    """A session idle with `requires_action` on `calls` parallel tool uses (always-ask bash
    when `ask`, else the custom `lookup`); returns the session id and the tool-use events."""
    name = "bash" if ask else "lookup"
    uses = [
        ToolUse(name, {"command": f"echo {i}"} if ask else {"key": str(i)}) for i in range(calls)
    ]
    fake_model.reset(ScriptedTurns([Turn(uses), Turn([Text("done")])], repeat_last=True))
    session_id, _ = make_session(client, tools=[ASK_BASH if ask else LOOKUP])
    say(client, session_id, "go")
    wait_idle(client, session_id, stop="requires_action")
    kind = "agent.tool_use" if ask else "agent.custom_tool_use"
    found = [e for e in events(client, session_id) if e.type == kind]
    assert len(found) == calls
    return session_id, found


def answers(log: list[Any], use_id: str) -> list[Any]:
    """Confirmations and results that refer to `use_id`."""
    return [
        e
        for e in log
        if e.type.startswith("user.")
        and use_id in (getattr(e, "tool_use_id", None), getattr(e, "custom_tool_use_id", None))
    ]


@pytest.mark.parametrize("ask", [True, False], ids=["confirmation", "custom-result"])
def test_two_answers_to_one_call_in_one_post_are_a_400(
    server: ServerProcess, fake_model: FakeModelServer, ask: bool
) -> None:
    client = server.client()
    session_id, (use,) = waiting_session(client, fake_model, ask=ask, calls=1)
    before = events(client, session_id)
    pair = (
        [confirm(use.id, "allow"), confirm(use.id, "deny")]
        if ask
        else [custom_result(use.id, "one"), custom_result(use.id, "two")]
    )
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.events.send(session_id, events=pair)  # type: ignore[arg-type]
    assert info.value.type == "invalid_request_error"
    assert "events[1]" in info.value.message and use.id in info.value.message
    assert "events[0]" in info.value.message, "the message names the duplicate"
    assert [e.id for e in events(client, session_id)] == [e.id for e in before]
    single = confirm(use.id, "deny") if ask else custom_result(use.id, "one")
    client.beta.sessions.events.send(session_id, events=[single])  # type: ignore[list-item]
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    assert len([a for a in answers(log, use.id) if a.type == single["type"]]) == 1
    assert_log_sound([e for e in log if e.type != "user.tool_confirmation"])


def race(server: ServerProcess, session_id: str, pair: list[dict[str, Any]]) -> list[Any]:
    """Send the two events in two threads at once; returns each one's response or error."""
    start = threading.Barrier(len(pair))
    outcomes: list[Any] = [None] * len(pair)

    client = server.client().with_options(max_retries=2)  # a retryable 409 would be retried

    def send(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = client.beta.sessions.events.send(session_id, events=[pair[index]])  # type: ignore[list-item]
        except anthropic.APIStatusError as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(pair))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


@pytest.mark.parametrize("ask", [True, False], ids=["confirmation", "custom-result"])
def test_concurrent_answers_to_one_call_exactly_one_wins(
    server: ServerProcess, fake_model: FakeModelServer, ask: bool
) -> None:
    client = server.client()
    session_id, uses = waiting_session(client, fake_model, ask=ask, calls=RACES)
    winners: dict[str, str] = {}
    for use in uses:
        # Denials, so that no sandbox runs whichever side wins.
        pair = (
            [confirm(use.id, "deny", deny_message=m) for m in ("left", "right")]
            if ask
            else [custom_result(use.id, t) for t in ("left", "right")]
        )
        outcomes = race(server, session_id, pair)
        won = [o for o in outcomes if not isinstance(o, anthropic.APIStatusError)]
        lost = [o for o in outcomes if isinstance(o, anthropic.APIStatusError)]
        assert len(won) == 1 and len(lost) == 1, outcomes
        assert isinstance(lost[0], anthropic.ConflictError), lost[0]
        assert lost[0].type == "conflict_error"
        assert lost[0].response.headers["x-should-retry"] == "false"
        winners[use.id] = won[0].data[0].id
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    for use in uses:
        logged = answers(log, use.id)
        assert [a.id for a in logged] == [winners[use.id]], "exactly the winner is logged"
    assert_log_sound([e for e in log if e.type != "user.tool_confirmation"])


def test_answer_after_an_interrupt_in_the_same_post_is_refused(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    session_id, (use,) = waiting_session(client, fake_model, ask=False, calls=1)
    before = events(client, session_id)
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.events.send(
            session_id,
            events=[{"type": "user.interrupt"}, custom_result(use.id, "late")],  # type: ignore[list-item]
        )
    assert "events[1]" in info.value.message and "interrupt" in info.value.message
    assert [e.id for e in events(client, session_id)] == [e.id for e in before]
    # In the other order the answer lands first, then the interrupt closes the turn.
    client.beta.sessions.events.send(
        session_id,
        events=[custom_result(use.id, "in time"), {"type": "user.interrupt"}],  # type: ignore[list-item]
    )
    wait_idle(client, session_id, stop="end_turn")
    assert len(answers(events(client, session_id), use.id)) == 1
