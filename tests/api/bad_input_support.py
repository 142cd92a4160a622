"""Shared pieces of the bad-input tests: the objects they refer to and a refusal checker.

Test support only; it must not hold tests or fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import pytest

from tests.api.helpers import LOOKUP

MODEL = "claude-sonnet-4-5"
TEXT = [{"type": "text", "text": "hi"}]
MESSAGE = {"type": "user.message", "content": TEXT}
Refusal = type[anthropic.APIStatusError]


@dataclass(frozen=True, slots=True, kw_only=True)
class Ids:
    """Objects the cases refer to, made once per module."""

    agent: str
    archived_agent: str
    env: str
    archived_env: str
    session: str
    deleted_session: str
    archived_session: str

    def fill(self, path: str) -> str:
        """`path` with `@` replaced by the session (or, outside sessions, the agent) id."""
        return path.replace("@", self.session if "sessions" in path else self.agent)


def make_ids(client: anthropic.Anthropic) -> Ids:
    """An agent, environments and sessions in the states the cases need."""
    agent = client.beta.agents.create(model=MODEL, name="bad-input", tools=[LOOKUP])  # type: ignore[list-item]
    archived_agent = client.beta.agents.create(model=MODEL, name="old")
    client.beta.agents.archive(archived_agent.id)
    env = client.beta.environments.create(name="bad-input")
    archived_env = client.beta.environments.create(name="old")
    client.beta.environments.archive(archived_env.id)
    made = [client.beta.sessions.create(agent=agent.id, environment_id=env.id).id for _ in range(3)]
    client.beta.sessions.delete(made[1])
    client.beta.sessions.archive(made[2])
    return Ids(
        agent=agent.id,
        archived_agent=archived_agent.id,
        env=env.id,
        archived_env=archived_env.id,
        session=made[0],
        deleted_session=made[1],
        archived_session=made[2],
    )


def refused(kind: Refusal, call: Callable[[], object], *fields: str) -> anthropic.APIStatusError:
    """`call` raises `kind` with an error envelope whose message names every one of `fields`."""
    with pytest.raises(kind) as info:
        call()
    error = info.value
    assert error.body["type"] == "error", error.body  # type: ignore[index]
    message = error.api_message
    assert isinstance(message, str) and message.strip(), error.body
    for field in fields:
        assert field in message, f"{field!r} not named in {message!r}"
    return error


def post(
    client: anthropic.Anthropic, path: str, body: object = None, content: bytes | None = None
) -> Callable[[], object]:
    """A raw POST the SDK's typed signatures would not let through."""
    if content is not None:
        return lambda: client.post(
            path,
            content=content,
            cast_to=str,
            options={"headers": {"content-type": "application/json"}},
        )
    return lambda: client.post(path, body=body, cast_to=str)


def get(client: anthropic.Anthropic, path: str, **params: Any) -> Callable[[], object]:
    """A raw GET with query parameters as given."""
    return lambda: client.get(path, cast_to=str, options={"params": params})


def agent_body(**fields: Any) -> dict[str, Any]:
    """A valid agent create body with `fields` changed."""
    return {"name": "a", "model": MODEL, **fields}


def custom(name: str = "lookup", schema: Any = None) -> dict[str, Any]:
    """A custom tool definition."""
    return {
        "type": "custom",
        "name": name,
        "description": "d",
        "input_schema": schema if schema is not None else {"type": "object"},
    }
