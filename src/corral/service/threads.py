"""Session threads (docs/threads.md): the primary thread is the session's own log; each
child thread is a session row with `parent_id` set, so it has its own log, lease and calls.

`route` decides where a client event sent to a session goes (pure); `ThreadService` serves
the `sessions.threads` endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.errors import BadRequest, NotFound
from corral.ids import now_rfc3339
from corral.pricing import money
from corral.service.common import check_limit
from corral.service.events import EventService, decode_cursor, encode_cursor
from corral.service.sessions import SessionService, client_event, render_session
from corral.session.log import EventQuery
from corral.session.projection import LIST_COST_NANOS
from corral.session.threads import (
    MAX_THREADS,
    child_view,
    derived_event_id,
    primary_own,
    primary_thread_id,
)
from corral.store.base import Page, SessionFilter, SessionRow, Store

_ANSWER_KEYS = {
    "user.custom_tool_result": "custom_tool_use_id",
    "user.tool_confirmation": "tool_use_id",
    "user.tool_result": "tool_use_id",
}


@dataclass(frozen=True, slots=True)
class Target:
    """Where one client event goes: the session's own log or one child thread's."""

    session_id: str
    """The log it is appended to (the session's or a child thread's row id)."""
    echo: bool
    """A child's event is also echoed (with `session_thread_id`) on the session's log."""


def route(
    session_id: str,
    body: Mapping[str, Any],
    call_owner: Mapping[str, str],
    live_children: Sequence[str],
) -> list[Target]:
    """Targets of a client event (pure). `call_owner` maps tool-use ids to the child thread
    whose log holds them (ids of the session's own calls are absent); `live_children` are the
    child threads not archived.

    Raises:
        BadRequest: an interrupt names a thread this session does not have.
    """
    kind = body.get("type")
    if kind in _ANSWER_KEYS:
        owner = call_owner.get(str(body.get(_ANSWER_KEYS[str(kind)])))
        return [Target(owner, True)] if owner else [Target(session_id, False)]
    if kind == "user.interrupt":
        thread = body.get("session_thread_id")
        if thread is None:
            return [Target(session_id, False), *(Target(c, True) for c in live_children)]
        if thread == primary_thread_id(session_id):
            return [Target(session_id, False)]
        if thread in live_children:
            return [Target(str(thread), True)]
        raise BadRequest(
            f"session_thread_id: no live thread {thread!r} in this session",
            error_code="thread_not_found",
        )
    return [Target(session_id, False)]


class ThreadService:
    """`sessions.threads.*` and the routing of client events to child threads."""

    def __init__(self, store: Store, sessions: SessionService, events: EventService) -> None:
        self.store = store
        self.sessions = sessions
        self.events = events

    async def children(self, session_id: str) -> list[SessionRow]:
        """The session's child threads, oldest first."""
        rows = await self.store.list_sessions(
            Page(limit=MAX_THREADS * 4, include_archived=True), SessionFilter(parent_id=session_id)
        )
        return sorted(rows, key=lambda r: (r.created_at, r.id))

    async def send(self, row: SessionRow, events: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Route a POST's events when any of them belongs to a child thread; None when all
        go to the session's own log (the caller appends them as before).

        A POST whose events go to different threads is refused: each log's append is atomic,
        but not several logs' together.
        """
        session_id = row.id
        if not (row.body.get("agent") or {}).get("multiagent"):
            return None
        children = await self.children(session_id)
        if not children:
            return None
        owners = await self._call_owners(children, events)
        live = [c.id for c in children if c.archived_at is None]
        targets = [route(session_id, e, owners, live) for e in events]
        if all(t == [Target(session_id, False)] for t in targets):
            return None
        if len(events) > 1:
            raise BadRequest(
                "events: events for a child thread (answers to its calls, interrupts) must be "
                "sent one per request"
            )
        stored: list[dict[str, Any]] = []
        body = events[0]
        for target in targets[0]:
            if target.session_id == session_id:
                stored.extend(await self.events.append_client(session_id, [body]))
                continue
            own = {k: v for k, v in body.items() if k != "session_thread_id"}
            if len(targets[0]) > 1:  # one event for several logs: each echo needs its own id
                own["id"] = derived_event_id(str(body["id"]), target.session_id)
            kept = await self.events.append_client(target.session_id, [own])
            echo = {**kept[0], "session_thread_id": target.session_id}
            await self.store.append(session_id, [echo])
            stored.append(echo)
        return {"data": stored}

    async def _call_owners(
        self, children: list[SessionRow], events: list[dict[str, Any]]
    ) -> dict[str, str]:
        ids = [str(e[_ANSWER_KEYS[e["type"]]]) for e in events if e["type"] in _ANSWER_KEYS]
        owners: dict[str, str] = {}
        if not ids:
            return owners
        for child in children:
            book = await self.store.read_calls(child.id, ids)
            for use_id in book.calls if book is not None else ():
                owners[use_id] = child.id
        return owners

    async def _thread(self, session_id: str, thread_id: str) -> tuple[SessionRow, SessionRow]:
        """(session row, the thread's row: the session's own for its primary thread)."""
        row = await self.sessions.row(session_id)
        if thread_id == primary_thread_id(session_id):
            return row, row
        child = await self.store.get_session(thread_id)
        if child is None or child.parent_id != session_id:
            raise NotFound(
                f"thread {thread_id} not found in session {session_id}",
                error_code="thread_not_found",
            )
        return row, child

    async def list(
        self, session_id: str, *, limit: int | None, page: str | None, statuses: list[str]
    ) -> dict[str, Any]:
        """The primary thread, then the children in creation order."""
        row = await self.sessions.row(session_id)
        size = check_limit(limit, default=1000, maximum=1000)
        threads = [
            render_thread(row, row),
            *(render_thread(row, c) for c in await self.children(session_id)),
        ]
        if statuses:
            threads = [t for t in threads if t["status"] in statuses]
        if page:
            ids = [t["id"] for t in threads]
            if page not in ids:
                raise BadRequest(
                    "page: invalid cursor (use the next_page value of a previous page)"
                )
            threads = threads[ids.index(page) + 1 :]
        shown = threads[:size]
        more = len(threads) > size
        return {"data": shown, "next_page": shown[-1]["id"] if more and shown else None}

    async def get(self, session_id: str, thread_id: str) -> dict[str, Any]:
        """One thread."""
        row, thread = await self._thread(session_id, thread_id)
        return render_thread(row, thread)

    async def archive(self, session_id: str, thread_id: str) -> dict[str, Any]:
        """Archive a child thread: it takes no more input (the primary thread is archived
        with its session)."""
        row, thread = await self._thread(session_id, thread_id)
        if thread.id == row.id:
            raise BadRequest("thread_id: the primary thread is archived by archiving its session")
        if thread.archived_at is None:
            await self.store.update_session(thread.id, thread.body, archived_at=now_rfc3339())
            if thread.summary.status != "terminated":
                terminated = client_event({"type": "session.status_terminated"})
                await self.store.append(thread.id, [terminated], wake=True)
        return await self.get(session_id, thread_id)

    async def list_events(
        self, session_id: str, thread_id: str, *, limit: int | None, page: str | None
    ) -> dict[str, Any]:
        """A page of one thread's own log."""
        row, thread = await self._thread(session_id, thread_id)
        size = check_limit(limit, default=100, maximum=1000)
        query = EventQuery(
            after_seq=decode_cursor(page) if page else None, limit=size + 1, order="asc"
        )
        rows = await self.store.read(thread.id, query)
        shown = rows[:size]
        agent_name = str(thread.body.get("agent", {}).get("name", ""))
        if thread.id == row.id:  # the primary's own log, without its children's cross-posts
            data = [r.body for r in shown if primary_own(r.body)]
        else:
            data = [child_view(r.body, thread.id, agent_name) for r in shown]
        more = len(rows) > size
        return {"data": data, "next_page": encode_cursor(shown[-1].seq) if more and shown else None}

    async def session_usage(self, session: dict[str, Any]) -> dict[str, Any]:
        """A rendered session with its usage as the sum over its threads."""
        if not (session.get("agent") or {}).get("multiagent"):
            return session
        children = await self.children(str(session["id"]))
        if not children:
            return session
        usage = dict(session["usage"])
        parent = await self.sessions.row(str(session["id"]))
        cost_nanos = int(parent.summary.usage.get(LIST_COST_NANOS, 0))
        for child in children:
            cost_nanos += int(child.summary.usage.get(LIST_COST_NANOS, 0))
            for key, value in render_session(child)["usage"].items():
                if key != "list_cost":  # summed unrounded, below
                    usage[key] = _add(usage.get(key), value)
        if cost_nanos or "list_cost" in usage:
            usage["list_cost"] = money(cost_nanos)
        return {**session, "usage": usage}


def _add(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _add(a.get(k), b.get(k)) for k in {*a, *b}}
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a + b
    return a


def render_thread(session: SessionRow, thread: SessionRow) -> dict[str, Any]:
    """The wire `session_thread` object of `thread` (the session's own row: its primary)."""
    rendered = render_session(thread)
    primary = thread.id == session.id
    agent = dict(rendered.get("agent") or {})
    agent.pop("multiagent", None)
    agent["type"] = "agent"
    usage = dict(rendered["usage"])
    usage.pop(LIST_COST_NANOS, None)
    return {
        "id": primary_thread_id(session.id) if primary else thread.id,
        "type": "session_thread",
        "session_id": session.id,
        "parent_thread_id": None if primary else primary_thread_id(session.id),
        "status": rendered["status"],
        "agent": agent,
        "workflow_run_id": None,
        "stats": {**rendered["stats"], "startup_seconds": 0.0},
        "usage": usage,
        "created_at": thread.created_at,
        "updated_at": rendered["updated_at"],
        "archived_at": thread.archived_at,
    }
