"""Small SDK-driving helpers shared by API tests."""

from __future__ import annotations

import time
from typing import Any

import anthropic

LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look up a key",
    "input_schema": {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
    },
}


def make_session(
    client: anthropic.Anthropic,
    *,
    tools: list[dict[str, Any]] | None = None,
    model: str = "claude-sonnet-4-5",
    system: str = "You help.",
) -> tuple[str, str]:
    """An agent + environment + session; returns (session_id, agent_id)."""
    agent = client.beta.agents.create(
        model=model, name="t", system=system, tools=tools if tools is not None else [LOOKUP]
    )  # type: ignore[arg-type]
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    return session.id, agent.id


def say(client: anthropic.Anthropic, session_id: str, text: str) -> str:
    """Send a user message; returns its event id."""
    sent = client.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
    )
    return sent.data[0].id


def events(client: anthropic.Anthropic, session_id: str) -> list[Any]:
    """The whole log, ascending."""
    return list(client.beta.sessions.events.list(session_id, limit=1000))


def wait_idle(
    client: anthropic.Anthropic,
    session_id: str,
    *,
    stop: str | None = None,
    after: int = 0,
    timeout: float = 30.0,
) -> Any:
    """Poll the log until a `session.status_idle` (with `stop` reason) appears after index
    `after`; returns that event."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = events(client, session_id)
        for event in log[after:]:
            if event.type == "session.status_idle" and (
                stop is None or event.stop_reason.type == stop
            ):
                return event
        time.sleep(0.05)
    raise AssertionError(f"no idle({stop}) in {[e.type for e in events(client, session_id)]}")


def assert_log_sound(log: list[Any]) -> None:
    """Unique ids and every tool use answered at most once."""
    ids = [e.id for e in log]
    assert len(ids) == len(set(ids)), "duplicate event ids"
    answered: dict[str, int] = {}
    for event in log:
        key = getattr(event, "tool_use_id", None) or getattr(event, "custom_tool_use_id", None)
        if key:
            answered[key] = answered.get(key, 0) + 1
    assert all(n == 1 for n in answered.values()), answered
