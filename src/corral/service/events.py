"""Session events: validate what clients send, append, read slices.

Validation of answers (tool confirmations, custom tool results) runs inside the append's
transaction against the store's call projection, item by item with the earlier items applied
(`Store.append_checked`): a POST is all or nothing, costs O(its own events), and of two racing
answers to one call exactly one is accepted. This module must not read the log to validate.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from corral.errors import BadRequest, Conflict
from corral.observability.metrics import APPEND_LATENCY
from corral.service.common import check_limit, normalize_time
from corral.service.sessions import SessionService, client_event
from corral.session.log import EventQuery
from corral.session.projection import Call, CallBook
from corral.session.threads import primary_thread_id
from corral.store.base import SessionRow, Store
from corral.wire.events import SendEvents

Router = Callable[[SessionRow, list[dict[str, Any]]], Awaitable[dict[str, Any] | None]]
"""(session row, client events) -> the response when they went to child threads, else None."""

_WAKES = frozenset(
    {
        "user.message",
        "user.interrupt",
        "user.custom_tool_result",
        "user.tool_confirmation",
        "user.tool_result",
        "system.message",
    }
)
LISTABLE_TYPES = frozenset(
    {
        "user.message",
        "user.interrupt",
        "user.tool_confirmation",
        "user.custom_tool_result",
        "user.tool_result",
        "system.message",
        "user.define_outcome",
        "agent.message",
        "agent.thinking",
        "agent.tool_use",
        "agent.tool_result",
        "agent.mcp_tool_use",
        "agent.mcp_tool_result",
        "agent.custom_tool_use",
        "agent.thread_message_sent",
        "agent.thread_message_received",
        "agent.thread_context_compacted",
        "session.status_running",
        "session.status_idle",
        "session.status_rescheduled",
        "session.status_terminated",
        "session.error",
        "session.updated",
        "session.usage",
        "session.thread_created",
        "session.thread_status_running",
        "session.thread_status_idle",
        "session.thread_status_rescheduled",
        "session.thread_status_terminated",
        "span.model_request_start",
        "span.model_request_end",
        "span.outcome_evaluation_start",
        "span.outcome_evaluation_ongoing",
        "span.outcome_evaluation_end",
        "workflow_run.created",
        "workflow_run.status_running",
        "workflow_run.status_idle",
        "workflow_run.phase_started",
        "workflow_run.phase_ended",
        "workflow_run.status_ended",
        "workflow_run.error",
    }
)


def encode_cursor(seq: int) -> str:
    """Opaque page cursor for a log position."""
    return "page_" + base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """Inverse of `encode_cursor`; BadRequest for anything else."""
    try:
        raw = cursor.removeprefix("page_")
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        kind, _, value = text.partition(":")
        if kind != "seq" or not (value.isascii() and value.isdigit()) or len(value) > 15:
            raise ValueError(kind)
        return int(value)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest("page: invalid cursor") from exc


class EventService:
    """Send and list session events."""

    def __init__(self, store: Store, sessions: SessionService) -> None:
        self.store = store
        self.sessions = sessions
        self.router: Router | None = None
        """Routes events meant for a session's child threads (`ThreadService.send`)."""

    async def send(self, session_id: str, req: SendEvents) -> dict[str, Any]:
        """Validate against the call projection and append, atomically; wake the brain."""
        row = await self.sessions.row(session_id)
        if row.archived_at is not None:
            raise BadRequest(f"session {session_id} is archived", error_code="session_archived")
        if row.summary.status == "terminated":
            raise BadRequest(f"session {session_id} is terminated")
        bodies = []
        remote: bool | None = None
        for index, item in enumerate(req.events):
            body = item.model_dump(exclude_none=True)
            if body["type"] == "user.tool_result" and remote is None:
                remote = await self.sessions.self_hosted(row.environment_id)
            _refuse_unsupported(index, body, remote=bool(remote))
            bodies.append(client_event(body))
        primary = primary_thread_id(session_id)
        for body in bodies:
            if body["type"] == "user.interrupt" and body.get("session_thread_id") == primary:
                del body["session_thread_id"]  # the session's own log is its primary thread
        if self.router is not None and (routed := await self.router(row, bodies)):
            return routed
        for index, body in enumerate(bodies):
            if body.get("session_thread_id") is not None:
                raise BadRequest(
                    f"events[{index}].session_thread_id: no such thread in this session",
                    error_code="thread_not_found",
                )
        stored = await self.append_client(session_id, bodies)
        if any(b["type"] == "user.message" for b in bodies):
            await self.sessions.input_arrived(row)  # a self-hosted session's worker may be gone
        return {"data": stored}

    async def append_client(
        self, session_id: str, bodies: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Validate client events against the log's calls and append them (waking its brain
        when they need it); the stored bodies."""
        wake = any(b["type"] in _WAKES for b in bodies)
        started = time.perf_counter()
        stored = await self.store.append_checked(session_id, bodies, _check, wake=wake)
        APPEND_LATENCY.labels("api").observe(time.perf_counter() - started)
        return [s.body for s in stored]

    async def list(
        self,
        session_id: str,
        *,
        limit: int | None,
        page: str | None,
        order: Literal["asc", "desc"],
        types: list[str],
        created: dict[str, str | None],
    ) -> dict[str, Any]:
        """A positional page of the log."""
        await self.sessions.row(session_id)
        size = check_limit(limit, default=100, maximum=1000)
        for kind in types:
            if kind not in LISTABLE_TYPES:
                raise BadRequest(f"types: unknown event type {kind!r}")
        position = decode_cursor(page) if page else None
        query = EventQuery(
            after_seq=position if order == "asc" else None,
            before_seq=position if order == "desc" else None,
            limit=size + 1,
            order=order,
            types=types,
            created_gt=normalize_time(created.get("created_gt"), "created_at[gt]"),
            created_gte=normalize_time(created.get("created_gte"), "created_at[gte]"),
            created_lt=normalize_time(created.get("created_lt"), "created_at[lt]"),
            created_lte=normalize_time(created.get("created_lte"), "created_at[lte]"),
        )
        rows = await self.store.read(session_id, query)
        shown = rows[:size]
        more = len(rows) > size
        return {
            "data": [r.body for r in shown],
            "next_page": encode_cursor(shown[-1].seq) if more and shown else None,
        }


def _refuse_unsupported(index: int, body: dict[str, Any], *, remote: bool = False) -> None:
    """Event types this server never accepts; no state needed, so checked before the store."""
    where = f"events[{index}]"
    if body["type"] == "user.tool_result" and not remote:
        raise BadRequest(f"{where}: user.tool_result is only accepted for self_hosted environments")
    if body["type"] == "user.define_outcome":
        raise BadRequest(f"{where}: user.define_outcome is not supported by this server yet")


def _check(book: CallBook, index: int, body: dict[str, Any]) -> None:
    """`EventCheck` of `send`: pure, run in the append's transaction (maybe more than once)."""
    if book.status == "terminated":
        raise BadRequest(f"session {book.session_id} is terminated")
    where = f"events[{index}]"
    kind = body["type"]
    if kind == "user.custom_tool_result":
        _check_answer(book, where, str(body["custom_tool_use_id"]), "custom", "custom_tool_use_id")
    elif kind == "user.tool_result":
        call = _check_answer(book, where, str(body["tool_use_id"]), "builtin", "tool_use_id")
        if call.permission == "ask" and call.confirmation != "allow":
            raise BadRequest(f"{where}.tool_use_id: that tool use awaits its confirmation")
    elif kind == "user.tool_confirmation":
        call = _check_answer(book, where, str(body["tool_use_id"]), None, "tool_use_id")
        if call.kind == "custom" or call.permission != "ask":
            raise BadRequest(f"{where}.tool_use_id: that tool use does not await confirmation")
        if call.confirmation is not None:
            raise Conflict(f"{where}.tool_use_id: already confirmed ({call.confirmation})")


def _check_answer(book: CallBook, where: str, use_id: str, kind: str | None, field: str) -> Call:
    call = book.calls.get(use_id)
    if call is None or (kind is not None and call.kind != kind):
        raise BadRequest(f"{where}.{field}: no such tool use in this session: {use_id!r}")
    earlier = book.answered_here.get(use_id)
    if earlier is not None:
        raise BadRequest(
            f"{where}.{field}: tool use {use_id} is already answered by events[{earlier}] "
            "of this request; send one answer per tool use"
        )
    if call.state == "answered":
        raise Conflict(f"{where}.{field}: tool use {use_id} was already answered")
    if call.state == "abandoned" or book.interrupt_pending:
        raise BadRequest(f"{where}.{field}: tool use {use_id} was abandoned by an interrupt")
    return call
