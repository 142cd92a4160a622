"""Conformance checks of the tool-call projection and checked appends (`Store.append_checked`).

Same form as `conformance`: `async def check_xxx(store)` on a fresh, open store, raising
AssertionError on a violation. The rules checked are `session.projection.CallBook`'s; what a
refusal means on the wire is the service's business, so the checks bring their own `check`.
"""

from __future__ import annotations

from typing import Any

import anyio

from corral.errors import Conflict
from corral.ids import new_id
from corral.session.log import EventQuery
from corral.session.projection import CallBook
from corral.store.base import Store
from corral.store.conformance_support import LONG_LEASE, Check, event, new_session, raises


def use(kind: str = "agent.custom_tool_use", **fields: Any) -> dict[str, Any]:
    """A tool-use event (custom unless `kind` says otherwise)."""
    return event(kind, name="t", input={}, **fields)


def custom_result(call_id: str) -> dict[str, Any]:
    """A `user.custom_tool_result` for `call_id`."""
    return event("user.custom_tool_result", custom_tool_use_id=call_id)


def confirmation(call_id: str, result: str = "allow") -> dict[str, Any]:
    """A `user.tool_confirmation` for `call_id`."""
    return event("user.tool_confirmation", tool_use_id=call_id, result=result)


def idle(reason: str = "end_turn", **fields: Any) -> dict[str, Any]:
    """A `session.status_idle`."""
    return event("session.status_idle", stop_reason={"type": reason, **fields})


def only_open(book: CallBook, index: int, body: dict[str, Any]) -> None:
    """An `EventCheck`: every answer must name a known call that is still open and unanswered
    (by this append too)."""
    for key in ("custom_tool_use_id", "tool_use_id"):
        call = book.calls.get(str(body.get(key)))
        if key in body and (call is None or call.state != "open" or call.confirmation):
            raise Conflict(f"events[{index}]: {body[key]} is not open")


async def states(store: Store, session_id: str) -> dict[str, tuple[str, str | None]]:
    """call id -> (state, confirmation) of every call of the session."""
    book = await store.read_calls(session_id)
    assert book is not None
    return {i: (c.state, c.confirmation) for i, c in book.calls.items()}


async def check_call_projection(store: Store) -> None:
    """Appends keep every call's state: uses open, results answer (only while open),
    confirmations stick, a turn close abandons what is open; interrupts pend until a close."""
    sid = await new_session(store)
    ask, custom, allowed = (
        use("agent.tool_use", evaluated_permission="ask"),
        use(),
        use("agent.tool_use"),
    )
    mcp = use("agent.mcp_tool_use", evaluated_permission="ask")
    await store.append(sid, [ask, custom, allowed, mcp, idle("requires_action", event_ids=[])])
    book = await store.read_calls(sid)
    assert book is not None and (book.status, book.interrupt_pending) == ("idle", False)
    got = {i: (c.kind, c.permission, c.state) for i, c in book.calls.items()}
    assert got == {
        ask["id"]: ("builtin", "ask", "open"),
        custom["id"]: ("custom", "allow", "open"),
        allowed["id"]: ("builtin", "allow", "open"),
        mcp["id"]: ("mcp", "ask", "open"),
    }
    await store.append(sid, [confirmation(ask["id"]), confirmation(ask["id"], "deny")])
    await store.append(sid, [custom_result(custom["id"]), custom_result(custom["id"])])
    await store.append(sid, [event("agent.tool_result", tool_use_id=allowed["id"])])
    await store.append(sid, [event("user.interrupt"), event("session.status_running")])
    book = await store.read_calls(sid, [ask["id"], custom["id"], "sevt_unknown"])
    assert book is not None and (book.status, book.interrupt_pending) == ("running", True)
    assert set(book.calls) == {ask["id"], custom["id"]}
    await store.append(sid, [idle()])
    await store.append(sid, [event("agent.mcp_tool_result", mcp_tool_use_id=mcp["id"])])
    assert await states(store, sid) == {
        ask["id"]: ("abandoned", "allow"),
        custom["id"]: ("answered", None),
        allowed["id"]: ("answered", None),
        mcp["id"]: ("abandoned", None),
    }
    book = await store.read_calls(sid, [])
    assert book is not None and (book.status, book.interrupt_pending, book.calls) == (
        "idle",
        False,
        {},
    )
    late = use()
    await store.append(sid, [late, event("session.status_terminated")])
    assert (await states(store, sid))[late["id"]] == ("abandoned", None)
    assert await store.read_calls(new_id("sesn")) is None


async def check_turn_close_in_one_append(store: Store) -> None:
    """Within one append, a close abandons only what is open at that point."""
    sid = await new_session(store)
    early, answered, kept = use(), use(), use()
    await store.append(sid, [early, answered])
    await store.append(sid, [custom_result(answered["id"]), idle(), kept])
    assert await states(store, sid) == {
        early["id"]: ("abandoned", None),
        answered["id"]: ("answered", None),
        kept["id"]: ("open", None),
    }


async def check_deleted_session_leaves_no_calls(store: Store) -> None:
    """Deleting a session deletes its calls: a new session with the same id starts empty."""
    sid = await new_session(store)
    await store.append(sid, [use(), event("user.interrupt")])
    assert await store.delete_session(sid) is True
    assert await store.read_calls(sid) is None
    await new_session(store, session_id=sid)
    book = await store.read_calls(sid)
    assert book is not None and (book.calls, book.interrupt_pending) == ({}, False)


async def check_checked_append_is_cumulative(store: Store) -> None:
    """`check` sees the append's earlier events applied, and a call answerable before any
    requires_action idle (the projection has it from its use on)."""
    sid = await new_session(store)
    ask = use("agent.tool_use", evaluated_permission="ask")
    await store.append(sid, [event("session.status_running"), ask])
    seen: list[tuple[int, str | None, dict[str, int]]] = []

    def record(book: CallBook, index: int, body: dict[str, Any]) -> None:
        seen.append((index, book.calls[ask["id"]].confirmation, dict(book.answered_here)))

    pair = [confirmation(ask["id"]), confirmation(ask["id"], "deny")]
    stored = await store.append_checked(sid, pair, record)
    assert [e.seq for e in stored] == [3, 4]
    assert seen[-2:] == [(0, None, {}), (1, "allow", {ask["id"]: 0})]
    assert await states(store, sid) == {ask["id"]: ("open", "allow")}


async def check_refused_checked_append_leaves_no_trace(store: Store) -> None:
    """A refused item refuses the whole append: no events, no projection change, no wake."""
    sid = await new_session(store)
    call = use()
    await store.append(sid, [call])
    answer = custom_result(call["id"])
    tries = [answer, custom_result(call["id"])]
    await raises(Conflict, store.append_checked(sid, [event(), *tries], only_open, wake=True))
    await raises(Conflict, store.append_checked(sid, [custom_result("sevt_x")], only_open))
    assert await store.last_seq(sid) == 1
    assert await states(store, sid) == {call["id"]: ("open", None)}
    assert await store.claim("w1", LONG_LEASE) is None
    await store.append_checked(sid, [answer], only_open, wake=True)
    assert await states(store, sid) == {call["id"]: ("answered", None)}
    assert await store.claim("w1", LONG_LEASE) is not None


async def check_concurrent_answers_one_wins(store: Store) -> None:
    """Of concurrent checked appends answering one call, exactly one is accepted, whatever
    else commits alongside (the check runs serialised with every append to the session)."""
    sid = await new_session(store)
    calls = [use() for _ in range(8)]
    await store.append(sid, calls)
    accepted: list[str] = []
    refused: list[str] = []

    async def answer(call_id: str) -> None:
        try:
            await store.append_checked(sid, [custom_result(call_id)], only_open)
        except Conflict:
            refused.append(call_id)
        else:
            accepted.append(call_id)

    async with anyio.create_task_group() as tg:
        for call in calls:
            for _ in range(3):
                tg.start_soon(answer, call["id"])
                tg.start_soon(store.append, sid, [event()])  # bystanders share the commit
    assert sorted(accepted) == sorted(c["id"] for c in calls)
    assert len(refused) == 2 * len(calls)
    log = await store.read(sid, EventQuery(types=["user.custom_tool_result"]))
    assert sorted(e.body["custom_tool_use_id"] for e in log) == sorted(accepted)
    assert len(await store.read(sid, EventQuery(types=["user.message"]))) == 3 * len(calls)


CALL_CHECKS: list[Check] = [
    check_call_projection,
    check_turn_close_in_one_append,
    check_deleted_session_leaves_no_calls,
    check_checked_append_is_cumulative,
    check_refused_checked_append_leaves_no_trace,
    check_concurrent_answers_one_wins,
]
