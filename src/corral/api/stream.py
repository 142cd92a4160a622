"""SSE live tail of a session's log: every persisted event after the stream opened, in order,
plus optional previews. The log is the source of truth; signals say "look again" and, when the
appender is in this process, carry the new events so an up-to-date stream needs no read.

Served as a bare ASGI callable (see `StreamRouter`) rather than through Starlette's response
and middleware stack: thousands of idle streams are held at once, so per-stream memory counts.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from corral.errors import ApiError, NotFound
from corral.ids import new_id, now_rfc3339
from corral.observability.metrics import SSE_CLIENTS
from corral.session.log import EventQuery, NewEvents, Preview, SessionGone, StoredEvent
from corral.session.threads import child_view, primary_own, primary_thread_id
from corral.stopping import Stopping
from corral.store.base import Store
from corral.wire.events import INTERNAL_EVENT_TYPES

PING_SECONDS = 15.0
_PATH = re.compile(r"^/v1/sessions/(?P<sid>[^/]+)/events/stream/?$")
_THREAD_PATH = re.compile(r"^/v1/sessions/(?P<sid>[^/]+)/threads/(?P<tid>[^/]+)/stream/?$")
_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def frame(name: str, data: dict[str, Any]) -> bytes:
    """One SSE frame; the SDK drops frames without an `event:` line."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


View = Callable[[dict[str, Any]], dict[str, Any]]
"""How a stream shows a stored event (a child thread's log: `child_view`). A log is always
streamed with the same view (a child's only through its thread stream), so frames are cached
per stored event."""


def primary_view(body: dict[str, Any]) -> dict[str, Any]:
    """A session's log as its primary thread's stream shows it: the events themselves, without
    its children's cross-posts (`primary_own`)."""
    return body


class _FrameCache:
    """Encode each stored event once, however many streams send it."""

    def __init__(self, size: int = 4096) -> None:
        self._frames: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = size

    def get(self, event: StoredEvent, view: View | None = None) -> bytes:
        key = (event.session_id, event.seq)
        found = self._frames.get(key)
        if found is None:
            body = event.body if view is None or view is primary_view else view(event.body)
            found = self._frames[key] = frame(str(body["type"]), body)
            if len(self._frames) > self._size:
                self._frames.popitem(last=False)
        return found


class StreamRouter:
    """In front of the app: GET /v1/sessions/{id}/events/stream goes straight to the tail.

    Authentication has already run (the key check wraps this router).
    """

    def __init__(
        self,
        app: ASGIApp,
        store: Store,
        render_error: Any,
        *,
        ping_seconds: float = PING_SECONDS,
        stopping: Stopping | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.render_error = render_error
        self.ping_seconds = ping_seconds
        self.stopping = stopping or Stopping()
        """Once requested, every stream ends its body cleanly (see `_tail`)."""
        self._open: set[anyio.CancelScope] = set()
        """The pumps of open streams, ended together when the process stops."""
        self.stopping.on_request(self._end_all)
        self.frames = _FrameCache()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        match = _PATH.match(path) or _THREAD_PATH.match(path)
        if match is None or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        session_id = match.group("sid")  # ASGI `path` is already percent-decoded
        try:
            row = None if "\x00" in session_id else await self.store.get_session(session_id)
            if row is None or row.parent_id is not None:
                raise NotFound(f"session {session_id} not found")
            log_id, view = session_id, None
            if "tid" in match.groupdict():
                log_id, view = await self._thread_log(session_id, match.group("tid"))
        except ApiError as exc:
            await self.render_error(exc)(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode(), keep_blank_values=False)
        deltas = {v for k, v in query if k in ("event_deltas[]", "event_deltas")}
        await self._tail(log_id, deltas, receive, send, view)

    def _end_all(self) -> None:
        for scope in self._open:
            scope.cancel()

    async def _thread_log(self, session_id: str, thread_id: str) -> tuple[str, View | None]:
        """The log a thread stream tails, and how it shows its events."""
        if thread_id == primary_thread_id(session_id):
            return session_id, primary_view
        child = None if "\x00" in thread_id else await self.store.get_session(thread_id)
        if child is None or child.parent_id != session_id:
            raise NotFound(
                f"thread {thread_id} not found in session {session_id}",
                error_code="thread_not_found",
            )
        name = str(child.body.get("agent", {}).get("name", ""))
        return thread_id, lambda body: child_view(body, thread_id, name)

    async def _tail(
        self,
        session_id: str,
        deltas: set[str],
        receive: Receive,
        send: Send,
        view: View | None = None,
    ) -> None:
        sub = self.store.subscribe(session_id)
        SSE_CLIENTS.inc()
        try:
            position = await self.store.last_seq(session_id)
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            await send(
                {"type": "http.response.body", "body": b": connected\n\n", "more_body": True}
            )
            ended = False
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
                self._open.add(tg.cancel_scope)
                if self.stopping.requested:  # opened while stopping: ends at once
                    tg.cancel_scope.cancel()
                try:
                    ended = await self._pump(session_id, sub, position, deltas, send, view)
                finally:
                    self._open.discard(tg.cancel_scope)
                tg.cancel_scope.cancel()
            if not ended and self.stopping.requested:
                # The process is stopping: end the chunked body properly, between frames, so
                # the client sees a clean end and reconnects (nothing is lost: it is all in
                # the log). Cut off by the server's own timeout instead, it would see a
                # broken response.
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write
        finally:
            SSE_CLIENTS.dec()
            sub.close()

    async def _pump(
        self,
        session_id: str,
        sub: Any,
        position: int,
        deltas: set[str],
        send: Send,
        view: View | None,
    ) -> bool:
        """Send events until cancelled; True when it ended the body itself (session gone)."""
        while True:
            signals = await sub.next(self.ping_seconds)
            if not signals:
                await _write(send, _PING)
                continue
            # What one wake-up brings goes out as one write: one send (and syscall) per
            # batch of signals rather than per event, in the same order.
            out: list[bytes] = []
            for signal in signals:
                if isinstance(signal, SessionGone):
                    out.append(_deleted_frame())
                    await _write(send, b"".join(out))
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return True
                if isinstance(signal, Preview):
                    if _wanted(signal.body, deltas):
                        out.append(frame(signal.body["type"], signal.body))
                elif isinstance(signal, NewEvents) and signal.last_seq > position:
                    events = signal.events
                    if not events or events[0].seq != position + 1:
                        query = EventQuery(after_seq=position, internal=True)
                        events = tuple(await self.store.read(session_id, query))
                    for event in events:
                        if event.seq > position:
                            position = event.seq
                            # Brain bookkeeping is not part of the hosted API: skip it, but
                            # move past it so it is never read again.
                            if event.type not in INTERNAL_EVENT_TYPES and (
                                view is not primary_view or primary_own(event.body)
                            ):
                                out.append(self.frames.get(event, view))
            if out:
                await _write(send, out[0] if len(out) == 1 else b"".join(out))


def _deleted_frame() -> bytes:
    body = {"id": new_id("sevt"), "type": "session.deleted", "processed_at": now_rfc3339()}
    return frame("session.deleted", body)


async def _write(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _wanted(preview: dict[str, Any], deltas: set[str]) -> bool:
    if not deltas:
        return False
    if preview["type"] == "event_start":
        return str(preview["event"]["type"]) in deltas
    return "agent.message" in deltas
