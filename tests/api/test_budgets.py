"""Usage, list cost and budgets through the official SDK, against a real server and the
wire-level fake model: prices from corral.toml routes and the built-in Claude list."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.api.helpers import LOOKUP, events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn, Usage
from tests.server import ServerProcess, backend_env

# priced-* costs 2 USD/MTok in and 10 out: a turn of 100k in + 10k out costs 30 cents
TOML = """
[[models.routes]]
match = "priced-*"
provider = "anthropic"
price = {input = 2.0, output = 10.0}

[[models.routes]]
match = "unpriced-*"
provider = "anthropic"
"""
BIG = Usage(input_tokens=100_000, output_tokens=10_000)
TURN_CENTS = 30


def usd(cents: int) -> dict[str, str]:
    return {"amount": str(cents), "currency": "USD"}


def limit(cents: int) -> dict[str, Any]:
    return {"type": "limit", "max_list_cost": usd(cents)}


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("corral")
    (data / "corral.toml").write_text(TOML)
    with backend_env(backend) as env:
        proc = ServerProcess(data, model_url=fake_model.url, env=env).start()
        yield proc
        proc.stop()


def session_on(
    client: anthropic.Anthropic, model: str, budget: dict[str, Any] | None = None
) -> str:
    agent = client.beta.agents.create(model=model, name="b", tools=[LOOKUP])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    extra: dict[str, Any] = {} if budget is None else {"budget": budget}
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id, **extra).id


def test_usage_and_list_cost_add_up_across_turns(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset([Turn([Text("one")], usage=BIG), Turn([Text("two")], usage=BIG)])
    session_id = session_on(client, "priced-model")
    say(client, session_id, "first")
    wait_idle(client, session_id, stop="end_turn")
    say(client, session_id, "second")
    wait_idle(client, session_id, stop="end_turn", after=len(events(client, session_id)) - 1)
    usage = client.beta.sessions.retrieve(session_id).usage
    assert (usage.input_tokens, usage.output_tokens) == (200_000, 20_000)
    assert usage.list_cost is not None
    assert usage.list_cost.model_dump() == usd(2 * TURN_CENTS)
    snapshots = [e for e in events(client, session_id) if e.type == "session.usage"]
    assert [s.usage.list_cost.amount for s in snapshots] == ["30", "60"]
    assert [s.usage.input_tokens for s in snapshots] == [100_000, 200_000]
    assert all(s.budget is None for s in snapshots)
    assert not any(e.type.startswith("corral.") for e in events(client, session_id))


def test_default_price_of_a_known_claude_model(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset([Turn([Text("hi")], usage=Usage(input_tokens=1_000_000, output_tokens=0))])
    session_id = session_on(client, "claude-sonnet-4-5")
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    usage = client.beta.sessions.retrieve(session_id).usage
    assert usage.list_cost is not None and usage.list_cost.amount == "300"  # $3/MTok


def test_small_budget_stops_before_the_next_model_call(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset(
        [Turn([ToolUse("lookup", {"key": "k"})], usage=BIG), Turn([Text("done")], usage=BIG)]
    )
    session_id = session_on(client, "priced-model", limit(40))
    assert client.beta.sessions.retrieve(session_id).budget.model_dump() == limit(40)
    say(client, session_id, "go")
    idle = wait_idle(client, session_id, stop="requires_action")
    client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": idle.stop_reason.event_ids[0],
                "content": [{"type": "text", "text": "v"}],
            }
        ],
    )
    wait_idle(client, session_id, stop="budget_reached")
    assert len(fake_model.requests) == 1  # 30 spent + at least 22 more would pass 40
    session = client.beta.sessions.retrieve(session_id)
    assert session.status == "idle"
    assert session.usage.list_cost is not None
    assert session.usage.list_cost.amount == str(TURN_CENTS)
    (snapshot,) = [e for e in events(client, session_id) if e.type == "session.usage"]
    assert snapshot.budget is not None and snapshot.budget.model_dump() == limit(40)

    # raising the budget and sending a message continues
    updated = client.beta.sessions.update(session_id, budget=limit(500))
    assert updated.budget is not None and updated.budget.model_dump() == limit(500)
    log = events(client, session_id)
    assert [e.budget.model_dump() for e in log if e.type == "session.updated"] == [limit(500)]
    say(client, session_id, "go on")
    wait_idle(client, session_id, stop="end_turn", after=len(log))
    assert len(fake_model.requests) == 2
    assert client.beta.sessions.retrieve(session_id).usage.list_cost.amount == "60"  # type: ignore[union-attr]


def test_budget_refusals_on_update_and_create(client: anthropic.Anthropic) -> None:
    session_id = session_on(client, "priced-model", limit(100))
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.update(session_id, budget=limit(0))
    assert "budget_not_raised" in str(info.value.body)
    with pytest.raises(anthropic.BadRequestError):
        client.beta.sessions.update(session_id, budget={"type": "limit", "max_list_cost": usd(-1)})  # type: ignore[typeddict-item]
    removed = client.beta.sessions.update(session_id, budget=None)
    assert removed.budget is None
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.update(session_id, budget=limit(100))
    assert "budget_create_only" in str(info.value.body)

    plain = session_on(client, "priced-model")
    with pytest.raises(anthropic.BadRequestError) as info:
        client.beta.sessions.update(plain, budget=limit(100))
    assert "budget_create_only" in str(info.value.body)
    with pytest.raises(anthropic.BadRequestError) as info:
        session_on(client, "unpriced-model", limit(100))
    assert "model_not_budgetable" in str(info.value.body)
    with pytest.raises(anthropic.BadRequestError):
        session_on(
            client, "priced-model", {"type": "limit", "max_list_cost": usd(7) | {"currency": "EUR"}}
        )
