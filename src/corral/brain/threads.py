"""Multi-agent threads in the brain (docs/threads.md).

A child thread is a session row of its own (`parent_id` = the session), so it is claimed,
leased, fenced and resumed exactly like a session; this module adds only what a thread does
beyond a session:

- `apply_thread` folds the thread bookkeeping of one event into `SessionState.thread`
  (pure): a child's outbox (status changes and client-facing calls to cross-post to the
  parent's log, turn closes to answer as thread messages and to report as progress), and a
  coordinator's newest received thread message and its children's progress (what its wait
  tool waits for, and whether anything can still come);
- `thread_calls.relay` (the `Relay` action) delivers a child's outbox to its parent's log, then logs
  `corral.relayed` under the child's fence. Deliveries carry ids derived from the events
  they copy, so a brain that dies between the two steps and re-runs the relay is refused by
  the parent log's unique `(session_id, id)` index instead of duplicating anything;
- `thread_calls.run_thread_tool` serves the coordinator's three tools. They log no start
  marker: each is idempotent by derived ids (the thread a start call makes, the message a
  send call delivers), so after a crash they simply run again.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral.brain import events as ev
from corral.session.threads import (
    SEND_TOOL,
    START_TOOL,
    THREAD_TOOLS,
    WAIT_TOOL,
    derived_event_id,
)
from corral.wire.events import (
    AgentCustomToolUseEvent,
    AgentMcpToolUseEvent,
    AgentMessageEvent,
    AgentThreadMessageReceivedEvent,
    AgentThreadMessageSentEvent,
    AgentToolUseEvent,
    LogEvent,
    RelayedEvent,
    SessionStatusIdleEvent,
    SessionStatusRescheduledEvent,
    SessionStatusRunningEvent,
    SessionStatusTerminatedEvent,
    ThreadProgressEvent,
    ThreadRoleEvent,
    UserMessageEvent,
)


class SessionState(Protocol):
    """What the thread fold reads and writes of `brain.state.SessionState` (a protocol, so
    this module stays below the state it is part of)."""

    thread: ThreadState
    last_input_seq: int
    last_answer_seq: int


class ToolCall(Protocol):
    """What the thread helpers read of a `brain.state.ToolCall`."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...


NOTHING_TO_WAIT_FOR = (
    "No thread is working, so there is nothing to wait for: start one with "
    f"{START_TOOL} or send a message with {SEND_TOOL}."
)

_STATUS_SUFFIX = {
    "session.status_running": "running",
    "session.status_idle": "idle",
    "session.status_rescheduled": "rescheduled",
    "session.status_terminated": "terminated",
}


@dataclass(slots=True)
class Outgoing:
    """One thing a child owes its parent's log."""

    seq: int
    body: dict[str, Any]
    """The event for the parent's log (id derived or copied, so delivery is idempotent)."""
    sent: dict[str, Any] | None = None
    """For a reply: the `agent.thread_message_sent` the child logs once it is delivered."""
    wake: bool = False
    """The parent's brain must look at it (a reply, a progress report)."""


@dataclass(slots=True)
class ChildProgress:
    """What a coordinator's log says of one of its child threads."""

    delivered: int = 0
    """Messages the coordinator logged sending it (`agent.thread_message_sent`; its task too)."""
    answered: int = 0
    """How many of them the thread reported answered or dropped (`corral.thread_progress`)."""
    final: bool = False
    """The thread is terminated: it answers nothing more."""

    @property
    def working(self) -> bool:
        """A reply from it can still come."""
        return self.delivered > self.answered and not self.final


@dataclass(slots=True)
class ThreadState:
    """Thread bookkeeping of one log (a session's or a child thread's)."""

    role: ThreadRoleEvent | None = None
    """Set on a child thread's log: whose thread it is."""
    outbox: list[Outgoing] = field(default_factory=list)
    relayed_seq: int = 0
    turn_reply: list[dict[str, Any]] | None = None
    """Text of the newest `agent.message` of the current turn (a child's reply)."""
    last_received_seq: int = 0
    """Seq of the newest `agent.thread_message_received` (what a wait call waits for)."""
    in_turn: bool = False
    """A child's turn is open (running since its last close): its close is a reply."""
    inputs: list[int] = field(default_factory=list)
    """Seqs of the thread messages a child received (its task, the coordinator's sends)."""
    children: dict[str, ChildProgress] = field(default_factory=dict)
    """A coordinator's child threads by id."""

    def child(self, thread_id: str) -> ChildProgress:
        """The progress of child `thread_id` (created at its first mention)."""
        return self.children.setdefault(thread_id, ChildProgress())


@dataclass(frozen=True, slots=True)
class Relay:
    """Deliver a child thread's outbox to its parent's log."""


def apply_thread(state: SessionState, seq: int, event: LogEvent) -> None:
    """Fold the thread bookkeeping of `event` (the log's next, at `seq`) into `state`."""
    ts = state.thread
    match event:
        case ThreadRoleEvent():
            ts.role = event
        case RelayedEvent():
            ts.relayed_seq = max(ts.relayed_seq, event.seq)
            ts.outbox = [o for o in ts.outbox if o.seq > ts.relayed_seq]
        case AgentThreadMessageReceivedEvent():
            ts.last_received_seq = seq
            state.last_input_seq = seq
        case AgentThreadMessageSentEvent() if ts.role is None:  # a coordinator's start or send
            ts.child(event.to_session_thread_id).delivered += 1
        case ThreadProgressEvent():
            progress = ts.child(event.thread_id)
            progress.answered = max(progress.answered, event.answered)
            progress.final = progress.final or event.final
        case _:
            pass
    if ts.role is not None:
        _child_outgoing(state, ts.role, seq, event)


def _child_outgoing(state: SessionState, role: ThreadRoleEvent, seq: int, event: LogEvent) -> None:
    ts = state.thread
    match event:
        case AgentThreadMessageReceivedEvent():
            ts.inputs.append(seq)
        case AgentMessageEvent():
            ts.turn_reply = [b for b in event.content if b.get("type") == "text"] or None
        case (
            SessionStatusRunningEvent()
            | SessionStatusIdleEvent()
            | SessionStatusRescheduledEvent()
            | SessionStatusTerminatedEvent()
        ):
            body: dict[str, Any] = {
                "id": event.id,
                "type": "session.thread_status_" + _STATUS_SUFFIX[event.type],
                "processed_at": event.processed_at,
                "session_thread_id": role.thread_id,
                "agent_name": role.agent_name,
            }
            if isinstance(event, SessionStatusIdleEvent):
                body["stop_reason"] = event.stop_reason.model_dump(exclude_none=True)
            ts.outbox.append(Outgoing(seq, body))
            closes = isinstance(event, SessionStatusTerminatedEvent) or (
                isinstance(event, SessionStatusIdleEvent)
                and event.stop_reason.type != "requires_action"
            )
            if closes:
                _close(state, role, seq, event)
            ts.in_turn = isinstance(event, SessionStatusRunningEvent) or (ts.in_turn and not closes)
        case AgentCustomToolUseEvent():
            ts.outbox.append(Outgoing(seq, _crosspost(event, role)))
        case AgentToolUseEvent() | AgentMcpToolUseEvent() if event.evaluated_permission == "ask":
            ts.outbox.append(Outgoing(seq, _crosspost(event, role)))
        case _:
            pass


def _close(state: SessionState, role: ThreadRoleEvent, seq: int, close: LogEvent) -> None:
    """A turn close owes the coordinator its reply (when a turn was open: an idle thread
    interrupted answers nothing), then its progress. The progress goes after the reply, so a
    coordinator that reads it all answered already has every reply it will get."""
    ts = state.thread
    if ts.in_turn:
        ts.outbox.append(_reply(ts, role, seq, close))
    final = isinstance(close, SessionStatusTerminatedEvent)
    # Messages the model's last request saw were answered, those before an interrupt or a
    # failure dropped (both move last_answer_seq); a later one starts another turn.
    answered = len(ts.inputs) if final else bisect_right(ts.inputs, state.last_answer_seq)
    progress = ev.event(
        "corral.thread_progress",
        id=derived_event_id(close.id, "progress"),
        thread_id=role.thread_id,
        answered=answered,
        final=final,
    )
    del progress["processed_at"]  # stamped when delivered, so a re-fold owes the same
    ts.outbox.append(Outgoing(seq, progress, wake=True))


def _reply(ts: ThreadState, role: ThreadRoleEvent, seq: int, close: LogEvent) -> Outgoing:
    """A closed turn answers the coordinator with its last message (or says it had none)."""
    content = ts.turn_reply
    ts.turn_reply = None
    if content is None:
        reason = close.stop_reason.type if isinstance(close, SessionStatusIdleEvent) else "ended"
        content = ev.text_content(f"(the thread ended its turn without a message: {reason})")
    received = ev.event(
        "agent.thread_message_received",
        id=derived_event_id(close.id, "reply"),
        from_session_thread_id=role.thread_id,
        from_agent_name=role.agent_name,
        content=content,
    )
    sent = ev.event(
        "agent.thread_message_sent",
        id=derived_event_id(close.id, "reply-sent"),
        to_session_thread_id=role.parent_thread_id,
        content=content,
    )
    for body in (received, sent):  # stamped when delivered, so a re-fold owes the same
        del body["processed_at"]
    return Outgoing(seq, received, sent, wake=True)


def _crosspost(event: LogEvent, role: ThreadRoleEvent) -> dict[str, Any]:
    body = event.model_dump(exclude_none=True)
    body["session_thread_id"] = role.thread_id
    return body


def relay_due(state: SessionState) -> Relay | None:
    """`Relay` when a child thread has undelivered events (decide asks this first)."""
    return Relay() if state.thread.outbox else None


def wait_empty(state: SessionState, call: ToolCall) -> bool:
    """A wait call while no thread message is logged that the model has not seen (one that
    arrived while the model was answering counts as unseen): it has nothing to return yet."""
    return (
        call.kind == "builtin"
        and call.name == WAIT_TOOL
        and state.thread.last_received_seq <= state.last_answer_seq
    )


def threads_working(state: SessionState) -> bool:
    """Whether a child thread of this coordinator can still reply: one has not answered
    every message it was sent (its task included) and is not terminated. A thread reports
    its progress after its reply, so a reply in flight keeps it working until it lands."""
    return any(c.working for c in state.thread.children.values())


def is_thread_tool(call: ToolCall) -> bool:
    """Whether `call` is one of the coordinator's thread tools."""
    return call.kind == "builtin" and call.name in THREAD_TOOLS


def thread_tool_use(agent: dict[str, Any], name: str, tool_input: Any) -> dict[str, Any] | None:
    """The `agent.tool_use` for a coordinator's call of a thread tool (None: not one)."""
    if name not in THREAD_TOOLS or not roster(agent):
        return None
    return ev.event(
        "agent.tool_use",
        name=name,
        input=dict(tool_input or {}),
        evaluated_permission="allow",
        evaluation={"type": "always_allow"},
    )


def transcript_view(event: LogEvent) -> LogEvent | None:
    """What the model's transcript gets for `event`: nothing for cross-posts and echoes
    (they belong to another thread's log), a user turn for a received thread message."""
    if event.session_thread_id is not None:
        return None
    if isinstance(event, AgentThreadMessageReceivedEvent):
        sender = event.from_agent_name or "the coordinator"
        head = f"<thread-message from={event.from_session_thread_id!r} agent={sender!r}>"
        texts = [str(b.get("text", "")) for b in event.content if b.get("type") == "text"]
        text = head + "\n" + "\n".join(texts) + "\n</thread-message>"
        return UserMessageEvent(
            id=event.id, type="user.message", content=[{"type": "text", "text": text}]
        )
    return event


# ---- the coordinator's tools --------------------------------------------------------


def roster(agent: dict[str, Any]) -> list[dict[str, Any]]:
    """The thread agents a coordinator may start (expanded at session creation)."""
    multi = agent.get("multiagent") or {}
    if multi.get("type") == "coordinator":
        entries = multi.get("agents") or []
    else:
        entries = (multi.get("subagents") or {}).get("predefined_agents") or []
    return [e for e in entries if isinstance(e, dict) and e.get("type") == "agent"]


def tool_definitions(agent: dict[str, Any]) -> list[dict[str, Any]]:
    """The thread tools offered to a coordinator's model (none for other agents)."""
    agents = roster(agent)
    if not agents:
        return []
    names = ", ".join(
        repr(a.get("name")) + (f" ({a['description']})" if a.get("description") else "")
        for a in agents
    )
    return [
        {
            "name": START_TOOL,
            "description": "Start a child thread: one of your agents works on a task in the "
            f"shared workspace, concurrently with you. Agents: {names}. Returns the thread id.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "agent": {"type": "string", "description": "the agent's name"},
                    "task": {"type": "string", "description": "what the thread should do"},
                },
                "required": ["agent", "task"],
            },
        },
        {
            "name": SEND_TOOL,
            "description": "Send a message to a child thread you started.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "thread_id": {"type": "string"},
                    "message": {"type": "string"},
                },
                "required": ["thread_id", "message"],
            },
        },
        {
            "name": WAIT_TOOL,
            "description": "Wait until a child thread replies (each thread replies with its "
            "last message whenever it finishes a turn). Replies arrive as thread messages. "
            "Returns an error at once when no thread is working.",
            "input_schema": {"type": "object", "properties": {}},
        },
    ]
