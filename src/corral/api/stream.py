"""SSE live tail of a session's log: every persisted event after the stream opened, in order,
plus optional previews. The log is the source of truth; signals only say "read again".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import StreamingResponse

from corral.ids import new_id, now_rfc3339
from corral.session.log import EventQuery, NewEvents, Preview, SessionGone
from corral.store.base import Store

PING_SECONDS = 15.0


def frame(name: str, data: dict[str, Any]) -> bytes:
    """One SSE frame; the SDK drops frames without an `event:` line."""
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def stream_events(store: Store, session_id: str, deltas: set[str]) -> StreamingResponse:
    """A streaming response that tails the session until the client leaves."""
    sub = store.subscribe(session_id)

    async def body() -> AsyncIterator[bytes]:
        try:
            position = await store.last_seq(session_id)
            yield b": connected\n\n"
            while True:
                signals = await sub.next(PING_SECONDS)
                if not signals:
                    yield frame("ping", {"type": "ping"})
                    continue
                for signal in signals:
                    if isinstance(signal, SessionGone):
                        yield frame(
                            "session.deleted",
                            {
                                "id": new_id("sevt"),
                                "type": "session.deleted",
                                "processed_at": now_rfc3339(),
                            },
                        )
                        return
                    if isinstance(signal, Preview):
                        if _wanted(signal.body, deltas):
                            yield frame(signal.body["type"], signal.body)
                    elif isinstance(signal, NewEvents) and signal.last_seq > position:
                        for event in await store.read(session_id, EventQuery(after_seq=position)):
                            position = event.seq
                            yield frame(event.type, event.body)
        finally:
            sub.close()

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


def _wanted(preview: dict[str, Any], deltas: set[str]) -> bool:
    if not deltas:
        return False
    if preview["type"] == "event_start":
        return str(preview["event"]["type"]) in deltas
    return "agent.message" in deltas
