"""Multi-agent threads end to end: the official SDK against a real server (SQLite and
PostgreSQL), a scripted fake model answering each agent by its system prompt, real sandboxes.

A coordinator starts two roster agents on child threads that work concurrently in the shared
workspace; one asks the client for a custom tool result, which the client answers on the
session by event id alone; the coordinator messages a thread, waits for replies and answers
the user.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.api.helpers import assert_log_sound, events, say, wait_idle
from tests.fakes.messages_server import (
    FakeModelServer,
    Reply,
    Text,
    ToolUse,
    Turn,
    by_system,
    first_user_text,
)
from tests.server import (
    DATABASE_URL_ENV,
    ServerProcess,
    fresh_postgres,
    short_lease_server,
    start_worker,
    stop_worker,
)

BASH = {"type": "agent_toolset_20260401"}
ASK_BASH = {
    "type": "agent_toolset_20260401",
    "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
}
APPROVE = {
    "type": "custom",
    "name": "approve",
    "description": "Ask the user to approve writing a file.",
    "input_schema": {"type": "object", "properties": {"file": {"type": "string"}}},
}
START, SEND, WAIT = "corral_thread_start", "corral_thread_send", "corral_thread_wait"
LEASE_SECONDS = 2.0


# ---- the scripted agents ----------------------------------------------------------------


def _user_blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for message in request["messages"]:
        if message["role"] == "user" and isinstance(message["content"], list):
            out.extend(message["content"])
    return out


def _result_texts(request: dict[str, Any]) -> list[str]:
    return [
        str(c.get("text", ""))
        for b in _user_blocks(request)
        if b.get("type") == "tool_result"
        for c in b.get("content") or []
    ]


def _thread_messages(request: dict[str, Any]) -> list[str]:
    return [
        str(b["text"])
        for b in _user_blocks(request)
        if b.get("type") == "text" and str(b.get("text", "")).startswith("<thread-message")
    ]


def _last_user(request: dict[str, Any]) -> list[dict[str, Any]]:
    last = request["messages"][-1]
    return list(last["content"]) if isinstance(last["content"], list) else []


def _turns(request: dict[str, Any]) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "assistant")


def coordinator(request: dict[str, Any]) -> Reply:
    """Start alpha and beta, wait; on the first reply ask alpha to confirm; answer the user
    once three replies (alpha, beta, alpha's confirmation) are in. A keyword in the user's
    message picks another scenario."""
    first = first_user_text(request)
    scenario = next((f for key, f in SCENARIOS.items() if key in first), None)
    if scenario is not None:
        return scenario(request)
    results, replies = _result_texts(request), _thread_messages(request)
    if _turns(request) == 0:
        return Turn(
            [
                ToolUse(START, {"agent": "alpha", "task": "write a.txt"}),
                ToolUse(START, {"agent": "beta", "task": "write b.txt"}),
            ]
        )
    alpha = next(t.split()[2] for t in results if t.startswith("Started") and "alpha" in t)
    if replies and not any(t.startswith("Message sent") for t in results):
        return Turn([ToolUse(SEND, {"thread_id": alpha, "message": "please confirm"})])
    if len(replies) < 3:
        return Turn([ToolUse(WAIT, {})])
    return Turn([Text("All done: " + " | ".join(sorted(r.splitlines()[1] for r in replies)))])


def kill_scenario(request: dict[str, Any]) -> Reply:
    """Start alpha and gamma, answer after both reply."""
    if _turns(request) == 0:
        return Turn(
            [
                ToolUse(START, {"agent": "alpha", "task": "write a.txt"}),
                ToolUse(START, {"agent": "gamma", "task": "write g.txt"}),
            ]
        )
    replies = _thread_messages(request)
    return Turn([Text("All done")]) if len(replies) >= 2 else Turn([ToolUse(WAIT, {})])


def nothing_scenario(request: dict[str, Any]) -> Reply:
    """Wait with no thread; then start gamma with a wait in the same response; after its
    reply, wait again (nothing left); then answer."""
    results, replies = _result_texts(request), _thread_messages(request)
    nothing = [t for t in results if t.startswith("No thread is working")]
    if not results:
        return Turn([ToolUse(WAIT, {})])
    if len(nothing) == 1 and not replies:
        return Turn([ToolUse(START, {"agent": "gamma", "task": "write g.txt"}), ToolUse(WAIT, {})])
    if len(nothing) == 1:
        return Turn([ToolUse(WAIT, {})])
    return Turn([Text(f"Nothing left: {len(replies)} reply")])


def ask_scenario(request: dict[str, Any]) -> Reply:
    """Start the asker, answer with its reply."""
    if _turns(request) == 0:
        return Turn([ToolUse(START, {"agent": "asker", "task": "write c.txt"})])
    replies = _thread_messages(request)
    if replies:
        return Turn([Text("All done: " + replies[0].splitlines()[1])])
    return Turn([ToolUse(WAIT, {})])


def one_thread_scenario(request: dict[str, Any]) -> Reply:
    """Start the sleeper, wait for its reply."""
    if _turns(request) == 0:
        return Turn([ToolUse(START, {"agent": "sleeper", "task": "sleep"})])
    return Turn([Text("All done")]) if _thread_messages(request) else Turn([ToolUse(WAIT, {})])


SCENARIOS = {
    "KILL": kill_scenario,
    "NOTHING": nothing_scenario,
    "ASK": ask_scenario,
    "ONE-THREAD": one_thread_scenario,
}


def alpha(request: dict[str, Any]) -> Reply:
    last = _last_user(request)
    if any(b.get("type") == "tool_result" for b in last):
        return Turn([Text("alpha wrote a.txt")])
    if any("please confirm" in str(b.get("text", "")) for b in last):
        return Turn([Text("alpha confirms")])
    return Turn([ToolUse("bash", {"command": "sleep 1; echo alpha > /workspace/a.txt"})])


def beta(request: dict[str, Any]) -> Reply:
    results = _result_texts(request)
    if not results:
        return Turn([ToolUse("approve", {"file": "b.txt"})])
    if len(results) == 1:
        return Turn([ToolUse("bash", {"command": f"echo beta-{results[0]} > /workspace/b.txt"})])
    return Turn([Text("beta wrote b.txt")])


def gamma(request: dict[str, Any]) -> Reply:
    if _result_texts(request):
        return Turn([Text("gamma wrote g.txt")])
    return Turn([ToolUse("bash", {"command": "sleep 1; echo gamma > /workspace/g.txt"})])


def asker(request: dict[str, Any]) -> Reply:
    """Run an always-ask bash call; say what became of it."""
    last = _last_user(request)
    result = next((b for b in last if b.get("type") == "tool_result"), None)
    if result is None:
        return Turn([ToolUse("bash", {"command": "echo asked | tee /workspace/c.txt"})])
    text = " ".join(str(c.get("text", "")) for c in result.get("content") or []).strip()
    return Turn([Text(("asker refused: " if result.get("is_error") else "asker ran: ") + text)])


def sleeper(request: dict[str, Any]) -> Reply:
    if _result_texts(request):
        return Turn([Text("slept")])
    return Turn([ToolUse("bash", {"command": "sleep 60"})])


SCRIPTS = by_system(
    {
        "ROLE:coordinator": coordinator,
        "ROLE:alpha": alpha,
        "ROLE:beta": beta,
        "ROLE:sleeper": sleeper,
        "ROLE:gamma": gamma,
        "ROLE:asker": asker,
    }
)


# ---- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def threaded(tmp_path: Path, fake_model: FakeModelServer, backend: str) -> Iterator[ServerProcess]:
    fake_model.reset(SCRIPTS)
    with short_lease_server(tmp_path / "data", fake_model.url, backend, LEASE_SECONDS) as proc:
        yield proc


def make_team(client: anthropic.Anthropic, *members: tuple[str, list[dict[str, Any]]]) -> str:
    """A session of a coordinator whose roster is `members` (name, tools)."""
    roster = [
        client.beta.agents.create(
            model="claude-sonnet-4-5",
            name=name,
            system=f"ROLE:{name}",
            tools=tools,  # type: ignore[arg-type]
        ).id
        for name, tools in members
    ]
    coord = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="lead",
        system="ROLE:coordinator",
        tools=[],
        multiagent={"type": "coordinator", "agents": roster},  # type: ignore[typeddict-item]
    )
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    return client.beta.sessions.create(agent=coord.id, environment_id=env.id).id


def wait_until(check: Any, what: str, timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def thread_events(client: anthropic.Anthropic, session_id: str, thread_id: str) -> list[Any]:
    return list(
        client.beta.sessions.threads.events.list(thread_id, session_id=session_id, limit=1000)
    )


def answer_approvals(client: anthropic.Anthropic, session_id: str) -> Any:
    """The cross-posted custom tool use, answered on the session by its id alone."""
    use = wait_until(
        lambda: next(
            (e for e in events(client, session_id) if e.type == "agent.custom_tool_use"), None
        ),
        "the child's custom tool use on the session log",
    )
    sent = client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.custom_tool_result",
                "custom_tool_use_id": use.id,
                "content": [{"type": "text", "text": "ok"}],
            }
        ],
    )
    return use, sent.data[0]


# ---- tests ------------------------------------------------------------------------------


def test_coordinator_and_two_threads(threaded: ServerProcess) -> None:
    client = threaded.client()
    session_id = make_team(client, ("alpha", [BASH]), ("beta", [BASH, APPROVE]))
    say(client, session_id, "split the work")
    use, echo = answer_approvals(client, session_id)
    assert use.session_thread_id and use.session_thread_id.startswith("sthr_")
    assert echo.session_thread_id == use.session_thread_id  # routed, not named by the client

    # The beta thread's own stream shows the rest of its turn.
    with client.beta.sessions.threads.events.stream(
        use.session_thread_id, session_id=session_id
    ) as stream:
        seen = []
        for event in stream:
            seen.append(event.type)
            if event.type == "session.thread_status_idle":
                break
    assert "agent.message" in seen or "agent.tool_use" in seen

    wait_idle(client, session_id, stop="end_turn", timeout=60)
    log = events(client, session_id)
    assert_log_sound(log)
    final = [e for e in log if e.type == "agent.message"]
    assert final[-1].content[0].text == (
        "All done: alpha confirms | alpha wrote a.txt | beta wrote b.txt"
    )
    created = [e for e in log if e.type == "session.thread_created"]
    assert sorted(e.agent_name for e in created) == ["alpha", "beta"]
    received = [e for e in log if e.type == "agent.thread_message_received"]
    assert len(received) == 3
    assert any(
        e.type == "session.thread_status_idle" and e.session_thread_id == use.session_thread_id
        for e in log
    )
    # Both threads were running at once: each started before the other's first turn ended.
    order = [
        (e.type, e.session_thread_id)
        for e in log
        if e.type in ("session.thread_status_running", "session.thread_status_idle")
    ]
    first_idle = next(i for i, (t, _) in enumerate(order) if t == "session.thread_status_idle")
    assert len({tid for t, tid in order[:first_idle] if t.endswith("running")}) == 2

    threads = list(client.beta.sessions.threads.list(session_id))
    assert len(threads) == 3 and threads[0].parent_thread_id is None
    children = {t.agent.name: t for t in threads[1:]}
    assert set(children) == {"alpha", "beta"}
    for child in children.values():
        assert child.parent_thread_id == threads[0].id
        got = client.beta.sessions.threads.retrieve(child.id, session_id=session_id)
        assert got.status == "idle" and got.usage is not None
    alpha_log = thread_events(client, session_id, children["alpha"].id)
    kinds = [e.type for e in alpha_log]
    assert kinds[0] == "agent.thread_message_received"
    assert kinds.count("agent.thread_message_sent") == 2  # two turns, two replies
    assert "session.thread_status_running" in kinds and "agent.tool_use" in kinds
    primary_log = thread_events(client, session_id, threads[0].id)
    assert primary_log[-1].type == "session.status_idle"
    assert all(
        not getattr(e, "session_thread_id", None) or e.type == "session.thread_created"
        for e in primary_log
    ), "the primary thread's own log holds no cross-posts"
    beta_log = thread_events(client, session_id, children["beta"].id)
    answers = [e for e in beta_log if e.type == "user.custom_tool_result"]
    assert [a.custom_tool_use_id for a in answers] == [use.id]

    workspace = threaded.data_dir / "sessions" / session_id / "workspace"
    assert (workspace / "a.txt").read_text() == "alpha\n"
    assert (workspace / "b.txt").read_text() == "beta-ok\n"

    session = client.beta.sessions.retrieve(session_id)
    per_thread = sum(int(t.usage.input_tokens or 0) for t in threads[1:])
    assert per_thread > 0
    primary = client.beta.sessions.threads.retrieve(threads[0].id, session_id=session_id)
    assert session.usage.input_tokens == per_thread + int(primary.usage.input_tokens or 0)
    # and so does its list cost (issue 12: cost adds up across threads)
    thread_costs = [_cost(t.usage) for t in threads[1:]]
    total = session.usage.list_cost
    assert total is not None and total.amount == str(int(total.amount))  # whole cents
    # each figure is rounded to the cent, so the sum of the parts may differ by that rounding
    parts = _cost(primary.usage) + sum(thread_costs)
    assert abs(_cost(session.usage) - parts) <= len(threads)


def _cost(usage: Any) -> Decimal:
    cost = getattr(usage, "list_cost", None)
    return Decimal(cost.amount) if cost is not None else Decimal(0)


def test_interrupt_one_thread(threaded: ServerProcess) -> None:
    client = threaded.client()
    session_id = make_team(client, ("sleeper", [BASH]), ("alpha", [BASH]))
    say(client, session_id, "ONE-THREAD start the sleeper")
    started = wait_until(
        lambda: next(
            (
                e
                for e in events(client, session_id)
                if e.type == "session.thread_status_running" and e.session_thread_id
            ),
            None,
        ),
        "the sleeper running",
    )
    thread_id = started.session_thread_id
    wait_until(
        lambda: any(
            e.type == "agent.tool_use" for e in thread_events(client, session_id, thread_id)
        ),
        "the sleeper's bash call",
    )
    client.beta.sessions.events.send(
        session_id, events=[{"type": "user.interrupt", "session_thread_id": thread_id}]
    )
    wait_idle(client, session_id, stop="end_turn", timeout=60)
    log = events(client, session_id)
    mine = [e for e in log if e.type == "user.interrupt" and not e.session_thread_id]
    assert [e.session_thread_id for e in log if e.type == "user.interrupt"] == [thread_id]
    assert mine == [], "the coordinator itself was not interrupted"
    final = [e for e in log if e.type == "agent.message"]
    assert final[-1].content[0].text.startswith("All done")
    child = thread_events(client, session_id, thread_id)
    result = next(e for e in child if e.type == "agent.tool_result")
    assert result.is_error and "Interrupted" in result.content[0].text

    # Without session_thread_id an interrupt reaches the primary and every live thread.
    sent = client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    assert [e.session_thread_id for e in sent.data] == [None, thread_id]
    wait_until(
        lambda: (
            [e.type for e in thread_events(client, session_id, thread_id)].count("user.interrupt")
            == 2
        ),
        "the second interrupt on the thread's log",
    )


@pytest.mark.parametrize("moment", ["threads_running", "first_reply"])
def test_kill_mid_run_resumes_every_thread(threaded: ServerProcess, moment: str) -> None:
    client = threaded.client()
    session_id = make_team(client, ("alpha", [BASH]), ("gamma", [BASH]))
    say(client, session_id, "KILL start both")

    def reached() -> bool:
        if moment == "first_reply":
            log = events(client, session_id)
            return any(e.type == "agent.thread_message_received" for e in log)
        return both_threads_running(client, session_id)

    wait_until(reached, moment)
    threaded.restart()
    client = threaded.client()
    wait_idle(client, session_id, stop="end_turn", timeout=90)
    assert_team_finished_once(client, session_id)


def both_threads_running(client: anthropic.Anthropic, session_id: str) -> bool:
    log = events(client, session_id)
    running = {e.session_thread_id for e in log if e.type == "session.thread_status_running"}
    return len(running) == 2


@pytest.mark.postgres
def test_killed_worker_leaves_every_thread_to_the_next(
    tmp_path: Path, fake_model: FakeModelServer
) -> None:
    """The scale-out deployment: an API-only server and `corral worker` processes on
    PostgreSQL. The worker running the coordinator and both threads is SIGKILLed mid-run; a
    new worker resumes all three once their leases lapse."""
    if not os.environ.get(DATABASE_URL_ENV):
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    fake_model.reset(SCRIPTS)
    lease = {"CORRAL_LEASE_SECONDS": str(LEASE_SECONDS)}
    data_dir = tmp_path / "data"
    with fresh_postgres("corral_threads") as url:
        api = ServerProcess(
            data_dir, model_url=fake_model.url, args=("--database-url", url, "--workers", "0")
        ).start()
        workers = [start_worker(data_dir, url, fake_model.url, lease)]
        try:
            client = api.client()
            session_id = make_team(client, ("alpha", [BASH]), ("gamma", [BASH]))
            say(client, session_id, "KILL start both")
            wait_until(lambda: both_threads_running(client, session_id), "both threads running")
            os.killpg(workers[0].pid, signal.SIGKILL)
            workers[0].wait()
            workers.append(start_worker(data_dir, url, fake_model.url, lease))
            wait_idle(client, session_id, stop="end_turn", timeout=90)
            assert_team_finished_once(client, session_id)
        finally:
            for worker in workers:
                stop_worker(worker)
            api.stop()


def assert_team_finished_once(client: anthropic.Anthropic, session_id: str) -> None:
    """The "KILL start both" script ran to its end with nothing lost or duplicated."""
    log = events(client, session_id)
    assert_log_sound(log)
    assert [e.content[0].text for e in log if e.type == "agent.message"] == ["All done"]
    assert len([e for e in log if e.type == "session.thread_created"]) == 2
    received = [e for e in log if e.type == "agent.thread_message_received"]
    assert len(received) == 2 and len({e.from_session_thread_id for e in received}) == 2
    threads = list(client.beta.sessions.threads.list(session_id))
    assert len(threads) == 3
    for child in threads[1:]:
        own = thread_events(client, session_id, child.id)
        assert_log_sound(own)
        kinds = [e.type for e in own]
        assert kinds.count("agent.thread_message_received") == 1  # its task, once
        assert kinds.count("agent.thread_message_sent") == 1  # its reply, once
        uses = [e for e in own if e.type == "agent.tool_use"]
        results = [e for e in own if e.type == "agent.tool_result"]
        assert len(uses) == len(results) == 1
        # every status change of the thread is cross-posted exactly once
        statuses = [e.id for e in own if e.type.startswith("session.thread_status_")]
        posted = [e.id for e in log if e.type.startswith("session.thread_status_")]
        assert set(statuses) <= set(posted)


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_a_child_threads_confirmation_is_answered_on_the_session(
    threaded: ServerProcess, answer: str
) -> None:
    """The child's always-ask call and its requires_action idle reach the session stream;
    the client confirms by event id alone; the child runs (or is refused), continues and
    replies to the coordinator."""
    client = threaded.client()
    session_id = make_team(client, ("asker", [ASK_BASH]))
    use = idle = None
    with client.beta.sessions.events.stream(session_id) as stream:
        say(client, session_id, "ASK have the asker write a file")
        for event in stream:
            if event.type == "agent.tool_use" and getattr(event, "session_thread_id", None):
                use = event
            if (
                event.type == "session.thread_status_idle"
                and event.stop_reason.type == "requires_action"
            ):
                idle = event
                break
    assert use is not None and idle is not None
    assert use.evaluated_permission == "ask" and use.name == "bash"
    assert idle.session_thread_id == use.session_thread_id
    assert idle.agent_name == "asker"
    assert idle.stop_reason.event_ids == [use.id]
    assert client.beta.sessions.retrieve(session_id).status == "running", "the lead waits"

    confirmation: dict[str, Any] = {
        "type": "user.tool_confirmation",
        "tool_use_id": use.id,
        "result": answer,
    }
    if answer == "deny":
        confirmation["deny_message"] = "not in this workspace"
    sent = client.beta.sessions.events.send(session_id, events=[confirmation])  # type: ignore[list-item]
    (echo,) = sent.data
    assert echo.type == "user.tool_confirmation" and echo.tool_use_id == use.id
    assert echo.session_thread_id == use.session_thread_id  # routed, not named by the client

    wait_idle(client, session_id, stop="end_turn", timeout=60)
    with pytest.raises(anthropic.ConflictError) as refused:  # answered: as on a session
        client.beta.sessions.events.send(session_id, events=[confirmation])  # type: ignore[list-item]
    assert "already" in refused.value.message and use.id in refused.value.message

    log = events(client, session_id)
    assert_log_sound([e for e in log if e.type != "user.tool_confirmation"])
    echoes = [e for e in log if e.type == "user.tool_confirmation"]
    assert [(e.id, e.session_thread_id) for e in echoes] == [(echo.id, use.session_thread_id)]
    final = [e.content[0].text for e in log if e.type == "agent.message"]
    workspace = threaded.data_dir / "sessions" / session_id / "workspace"
    if answer == "allow":
        assert final == ["All done: asker ran: asked"]
        assert (workspace / "c.txt").read_text() == "asked\n"
    else:
        assert final == [
            "All done: asker refused: Permission denied by the user: not in this workspace"
        ]
        assert not (workspace / "c.txt").exists()

    child = thread_events(client, session_id, use.session_thread_id)
    confirmations = [e for e in child if e.type == "user.tool_confirmation"]
    assert [(e.id, e.result) for e in confirmations] == [(echo.id, answer)]
    result = next(e for e in child if e.type == "agent.tool_result")
    assert result.tool_use_id == use.id and result.is_error == (answer == "deny")
    kinds = [e.type for e in child]
    assert kinds.count("agent.thread_message_sent") == 1  # one turn, one reply
    statuses = [
        e.stop_reason.type if e.type == "session.thread_status_idle" else e.type
        for e in child
        if e.type.startswith("session.thread_status_")
    ]
    running = "session.thread_status_running"
    assert statuses == [running, "requires_action", running, "end_turn"]


def test_a_wait_with_no_thread_working_answers_at_once(threaded: ServerProcess) -> None:
    """The coordinator's first call is a wait with no thread: an error result, not a wait
    until the user interrupts. A wait after the only thread replied answers the same way."""
    client = threaded.client()
    session_id = make_team(client, ("gamma", [BASH]))
    say(client, session_id, "NOTHING to do yet")
    wait_idle(client, session_id, stop="end_turn", timeout=60)
    log = events(client, session_id)
    assert_log_sound(log)
    assert [e.content[0].text for e in log if e.type == "agent.message"] == [
        "Nothing left: 1 reply"
    ]
    waits = {e.id for e in log if e.type == "agent.tool_use" and e.name == WAIT}
    results = [e for e in log if e.type == "agent.tool_result" and e.tool_use_id in waits]
    assert [(r.is_error, r.content[0].text.split(":")[0]) for r in results] == [
        (True, "No thread is working, so there is nothing to wait for"),
        (False, "Thread message(s) arrived; they follow this result."),
        (True, "No thread is working, so there is nothing to wait for"),
    ]
    assert "corral_thread_start" in results[0].content[0].text
    received = [e for e in log if e.type == "agent.thread_message_received"]
    assert len(received) == 1
    # the wait that came with the start blocked until gamma's reply was logged
    assert log.index(received[0]) < log.index(results[1])
    assert not any(e.type == "user.interrupt" for e in log)
