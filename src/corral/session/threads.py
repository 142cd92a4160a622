"""Pure naming rules of multi-agent threads (docs/threads.md), shared by the brain (which
starts threads and cross-posts their events) and the service (which routes client events).

A child thread is a session row of its own whose `parent_id` is the session; its id is
derived from the coordinator's tool call that started it, so a brain that re-runs that call
after a crash finds the thread it already made instead of making a second one. Events a
brain delivers to another log get ids derived the same way, so a re-delivery is refused by
the log's unique `(session_id, id)` index instead of being logged twice.
"""

from __future__ import annotations

import hashlib
from typing import Any

from corral.ids import _ALPHABET

START_TOOL = "corral_thread_start"
SEND_TOOL = "corral_thread_send"
WAIT_TOOL = "corral_thread_wait"
THREAD_TOOLS = frozenset({START_TOOL, SEND_TOOL, WAIT_TOOL})
"""The coordinator's thread tools; custom tools of a coordinator may not use these names."""
MAX_THREADS = 16
"""Child threads per session (`thread_limit_error` beyond)."""


def _digest(text: str, length: int = 26) -> str:
    raw = int.from_bytes(hashlib.sha256(text.encode()).digest()[:17], "big")
    chars = []
    for _ in range(length):
        raw, rem = divmod(raw, 32)
        chars.append(_ALPHABET[rem])
    return "".join(chars)


def primary_thread_id(session_id: str) -> str:
    """The primary thread of a session (the session's own log)."""
    return "sthr_" + session_id.partition("_")[2]


def session_of_primary(thread_id: str) -> str:
    """Inverse of `primary_thread_id`."""
    return "sesn_" + thread_id.partition("_")[2]


def child_thread_id(start_call_id: str) -> str:
    """The thread started by the coordinator's call `start_call_id`."""
    return "sthr_" + _digest("thread:" + start_call_id)


def derived_event_id(source_id: str, tag: str) -> str:
    """The id of the event delivered to another log because of event `source_id`."""
    return "sevt_" + _digest(f"{tag}:{source_id}")


_THREAD_STATUS = {
    "session.status_running": "session.thread_status_running",
    "session.status_idle": "session.thread_status_idle",
    "session.status_rescheduled": "session.thread_status_rescheduled",
    "session.status_terminated": "session.thread_status_terminated",
}


def child_view(body: dict[str, Any], thread_id: str, agent_name: str) -> dict[str, Any]:
    """An event of a child thread's log as the thread endpoints show it: its status events
    are the SDK's `session.thread_status_*` (the same ids its parent's cross-posts carry)."""
    kind = _THREAD_STATUS.get(str(body.get("type")))
    if kind is None:
        return body
    out = {**body, "type": kind, "session_thread_id": thread_id, "agent_name": agent_name}
    return out


def primary_own(body: dict[str, Any]) -> bool:
    """Whether an event of a session's log is its primary thread's own (not a child's
    cross-post or a routed answer's echo; a `session.thread_created` is the parent's)."""
    return not body.get("session_thread_id") or body.get("type") == "session.thread_created"
