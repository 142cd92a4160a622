"""Validating a POST to /events costs O(its own events): the log is never read to do it.

The real `EventService` runs on a real store (both backends) holding a long log; the store is
wrapped only to count the log reads it is asked for, everything else goes through unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.errors import BadRequest, Conflict
from corral.files.blobs import LocalBlobStore
from corral.files.service import FileService
from corral.service.agents import AgentService
from corral.service.events import EventService
from corral.service.resources import SessionResources
from corral.service.sessions import SessionService
from corral.session.log import EventQuery, StoredEvent
from corral.store.base import Store
from corral.store.conformance_calls import use
from corral.store.conformance_support import event, new_session
from corral.wire.events import SendEvents

pytestmark = pytest.mark.anyio

TURNS = 400
"""Each turn logs 8 events with one answered tool use: a log of 3200 events before the POST."""


class ReadCounting:
    """The store, recording every log read asked of it."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.reads: list[EventQuery] = []

    async def read(self, session_id: str, query: EventQuery) -> list[StoredEvent]:
        self.reads.append(query)
        return await self.inner.read(session_id, query)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def service(store: Any, tmp_path: Path) -> EventService:
    """The API's event service over `store`, wired as the runtime wires it."""
    files = FileService(store, LocalBlobStore(tmp_path / "blobs"), max_bytes=1 << 20)
    return EventService(store, SessionService(store, AgentService(store), SessionResources(files)))


async def long_session(store: Store) -> tuple[str, str, str]:
    """A session with a long log that now waits on an `ask` tool use and a custom tool use."""
    sid = await new_session(store)
    for _ in range(TURNS // 50):
        batch: list[dict[str, Any]] = []
        for _ in range(50):
            call = use()
            batch += [
                event("session.status_running"),
                event("agent.message", content=[{"type": "text", "text": "x" * 200}]),
                call,
                event("session.status_idle", stop_reason={"type": "requires_action"}),
                event("user.custom_tool_result", custom_tool_use_id=call["id"]),
                event("session.status_running"),
                event("agent.message", content=[{"type": "text", "text": "done"}]),
                event("session.status_idle", stop_reason={"type": "end_turn"}),
            ]
        await store.append(sid, batch)
    ask, custom = use("agent.tool_use", evaluated_permission="ask"), use()
    await store.append(sid, [event("session.status_running"), ask, custom])
    return sid, ask["id"], custom["id"]


def send(events: list[dict[str, Any]]) -> SendEvents:
    return SendEvents.model_validate({"events": events})


async def test_validating_a_post_reads_no_log(store: Store, tmp_path: Path) -> None:
    sid, ask, custom = await long_session(store)
    assert await store.last_seq(sid) == TURNS * 8 + 3
    counting = ReadCounting(store)
    events = service(counting, tmp_path)
    answers = [
        {"type": "user.tool_confirmation", "tool_use_id": ask, "result": "deny"},
        {"type": "user.custom_tool_result", "custom_tool_use_id": custom},
    ]
    sent = await events.send(sid, send(answers))
    assert [e["type"] for e in sent["data"]] == [a["type"] for a in answers]
    with pytest.raises(Conflict):
        await events.send(sid, send(answers[1:]))
    with pytest.raises(BadRequest):
        await events.send(sid, send([dict(answers[0], tool_use_id="sevt_unknown")]))
    assert counting.reads == [], "validation read the log"
    book = await store.read_calls(sid, [ask, custom])
    assert book is not None
    assert (book.calls[ask].confirmation, book.calls[custom].state) == ("deny", "answered")
