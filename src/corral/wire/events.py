"""Session events: client-sent bodies (`events.send`, `initial_events`), content blocks, and
the typed union of every event a session log holds (`LogEvent`, read back by `parse_event`).

Wire shapes only: no I/O, no policy. Request bodies are strict (unknown fields are a 400);
logged events are lenient (the log is trusted and keeps fields we do not model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator

from corral.wire.common import NonEmpty, Strict


class TextBlock(Strict):
    """`{type: "text", text}`."""

    type: Literal["text"]
    text: str
    citations: list[dict[str, Any]] | None = None


class Base64Source(Strict):
    """Inline bytes."""

    type: Literal["base64"]
    media_type: NonEmpty
    data: str


class UrlSource(Strict):
    """A URL the model fetches."""

    type: Literal["url"]
    url: NonEmpty


class FileSource(Strict):
    """An uploaded file."""

    type: Literal["file"]
    file_id: NonEmpty


class PlainTextSource(Strict):
    """Inline text document."""

    type: Literal["text"]
    media_type: Literal["text/plain"] = "text/plain"
    data: str


ImageSource = Annotated[Base64Source | UrlSource | FileSource, Field(discriminator="type")]
DocumentSource = Annotated[
    Base64Source | UrlSource | FileSource | PlainTextSource, Field(discriminator="type")
]


class ImageBlock(Strict):
    """An image."""

    type: Literal["image"]
    source: ImageSource


class DocumentBlock(Strict):
    """A document."""

    type: Literal["document"]
    source: DocumentSource
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None


class RedactedBlock(Strict):
    """Content withheld by policy."""

    type: Literal["redacted"]


class SearchResultBlock(Strict):
    """A search result (tool results only)."""

    type: Literal["search_result"]
    source: str
    title: str
    content: list[TextBlock]
    citations: dict[str, Any] | None = None


MessageBlock = Annotated[
    TextBlock | ImageBlock | DocumentBlock | RedactedBlock, Field(discriminator="type")
]
ResultBlock = Annotated[
    TextBlock | ImageBlock | DocumentBlock | SearchResultBlock, Field(discriminator="type")
]


class UserMessage(Strict):
    """Starts or continues a turn."""

    type: Literal["user.message"]
    content: Annotated[list[MessageBlock], Field(min_length=1)]


class UserInterrupt(Strict):
    """Stops the current work."""

    type: Literal["user.interrupt"]
    session_thread_id: str | None = None


class UserToolConfirmation(Strict):
    """Answers an `ask` tool use."""

    type: Literal["user.tool_confirmation"]
    tool_use_id: NonEmpty
    result: Literal["allow", "deny"]
    deny_message: str | None = None

    @model_validator(mode="after")
    def _deny_message_only_with_deny(self) -> UserToolConfirmation:
        if self.deny_message is not None and self.result != "deny":
            raise ValueError("deny_message is only allowed with result 'deny'")
        return self


class UserCustomToolResult(Strict):
    """Answers an `agent.custom_tool_use`."""

    type: Literal["user.custom_tool_result"]
    custom_tool_use_id: NonEmpty
    content: list[ResultBlock] | None = None
    is_error: bool | None = None


class UserToolResult(Strict):
    """Answers a built-in tool use on a self-hosted environment."""

    type: Literal["user.tool_result"]
    tool_use_id: NonEmpty
    content: list[ResultBlock] | None = None
    is_error: bool | None = None


class SystemMessage(Strict):
    """A mid-conversation system turn."""

    type: Literal["system.message"]
    content: Annotated[list[TextBlock], Field(min_length=1)]


class UserDefineOutcome(Strict):
    """Outcome-driven work (grader loop)."""

    type: Literal["user.define_outcome"]
    description: NonEmpty
    rubric: dict[str, Any]
    max_iterations: Annotated[int, Field(ge=1, le=20)] | None = None


ClientEvent = Annotated[
    UserMessage
    | UserInterrupt
    | UserToolConfirmation
    | UserCustomToolResult
    | UserToolResult
    | SystemMessage
    | UserDefineOutcome,
    Field(discriminator="type"),
]
InitialEvent = Annotated[UserMessage | UserDefineOutcome, Field(discriminator="type")]


class SendEvents(Strict):
    """POST /v1/sessions/{id}/events."""

    events: Annotated[list[ClientEvent], Field(min_length=1, max_length=100)]


# ---- the session log: one typed union of every stored event ---------------------------------


class Logged(BaseModel):
    """Base of an event read back from a session log (ids and timestamps set at append)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    processed_at: str | None = None
    session_thread_id: str | None = None
    """On a session's log: set on what a child thread cross-posted (and on routed answers'
    echoes); such events belong to that thread's log, not to this one's state."""


Block = dict[str, Any]
"""A content block as stored (validated when it was sent or produced)."""


class UserMessageEvent(Logged):
    """`user.message`."""

    type: Literal["user.message"]
    content: list[Block]


class UserInterruptEvent(Logged):
    """`user.interrupt`."""

    type: Literal["user.interrupt"]


class UserToolConfirmationEvent(Logged):
    """`user.tool_confirmation`: the client allows or denies an `ask` tool use."""

    type: Literal["user.tool_confirmation"]
    tool_use_id: str
    result: Literal["allow", "deny"]
    deny_message: str | None = None


class UserCustomToolResultEvent(Logged):
    """`user.custom_tool_result`."""

    type: Literal["user.custom_tool_result"]
    custom_tool_use_id: str
    content: list[Block] | None = None
    is_error: bool | None = None


class UserToolResultEvent(Logged):
    """`user.tool_result` (self-hosted environments)."""

    type: Literal["user.tool_result"]
    tool_use_id: str
    content: list[Block] | None = None
    is_error: bool | None = None


class SystemMessageEvent(Logged):
    """`system.message`."""

    type: Literal["system.message"]
    content: list[Block]


class UserDefineOutcomeEvent(Logged):
    """`user.define_outcome` (refused by this build; modelled so old logs parse)."""

    type: Literal["user.define_outcome"]


Permission = Literal["allow", "ask", "deny"]


class AgentMessageEvent(Logged):
    """`agent.message`."""

    type: Literal["agent.message"]
    content: list[Block]


class AgentThinkingEvent(Logged):
    """`agent.thinking` (no text is stored)."""

    type: Literal["agent.thinking"]


class ToolEvaluation(BaseModel):
    """Which permission policy produced `evaluated_permission` (the wire's `evaluation`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: str
    """always_allow, always_ask or auto (kept as text: logs outlive the set of policies)."""


class AgentToolUseEvent(Logged):
    """`agent.tool_use`: a built-in tool call, run by the server."""

    type: Literal["agent.tool_use"]
    name: str
    input: dict[str, Any] = Field(default_factory=dict)
    evaluated_permission: Permission = "allow"
    evaluation: ToolEvaluation | None = None


class AgentCustomToolUseEvent(Logged):
    """`agent.custom_tool_use`: a call the client executes."""

    type: Literal["agent.custom_tool_use"]
    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class AgentMcpToolUseEvent(Logged):
    """`agent.mcp_tool_use`."""

    type: Literal["agent.mcp_tool_use"]
    name: str
    """The tool's name on its MCP server (the model sees `tools.mcp_names.mcp_tool_name`)."""
    mcp_server_name: str = ""
    input: dict[str, Any] = Field(default_factory=dict)
    evaluated_permission: Permission = "allow"
    evaluation: ToolEvaluation | None = None


class AgentToolResultEvent(Logged):
    """`agent.tool_result`: the outcome of a server-run built-in call."""

    type: Literal["agent.tool_result"]
    tool_use_id: str
    content: list[Block] | None = None
    is_error: bool | None = None


class AgentMcpToolResultEvent(Logged):
    """`agent.mcp_tool_result`."""

    type: Literal["agent.mcp_tool_result"]
    mcp_tool_use_id: str
    content: list[Block] | None = None
    is_error: bool | None = None


class SessionStatusRunningEvent(Logged):
    """`session.status_running`."""

    type: Literal["session.status_running"]


StopType = Literal["end_turn", "requires_action", "retries_exhausted", "refusal", "budget_reached"]


class StopReason(BaseModel):
    """Why a session went idle; `event_ids` only with `requires_action`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: StopType
    event_ids: list[str] | None = None


class SessionStatusIdleEvent(Logged):
    """`session.status_idle`."""

    type: Literal["session.status_idle"]
    stop_reason: StopReason


class SessionStatusRescheduledEvent(Logged):
    """`session.status_rescheduled`: a retry is due."""

    type: Literal["session.status_rescheduled"]


class SessionStatusTerminatedEvent(Logged):
    """`session.status_terminated`: no more turns."""

    type: Literal["session.status_terminated"]


class RetryStatus(BaseModel):
    """Whether the failed work will be retried."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: Literal["retrying", "exhausted"]


class SessionErrorBody(BaseModel):
    """The `error` object of a `session.error`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    type: str
    message: str
    retry_status: RetryStatus


class SessionErrorEvent(Logged):
    """`session.error`."""

    type: Literal["session.error"]
    error: SessionErrorBody


class SessionUpdatedEvent(Logged):
    """`session.updated`: title, metadata, agent or budget changed (`budget` is in
    `model_fields_set` only when the update changed it; None then means removed)."""

    type: Literal["session.updated"]
    budget: dict[str, Any] | None = None


class SessionUsageEvent(Logged):
    """`session.usage`: the session's cumulative usage (with `list_cost`) after a model
    request, and its budget at that moment."""

    type: Literal["session.usage"]
    usage: dict[str, Any] = Field(default_factory=dict)
    budget: dict[str, Any] | None = None


class SpanModelRequestStartEvent(Logged):
    """`span.model_request_start`: a model call began (its request is the log before it)."""

    type: Literal["span.model_request_start"]


class SpanModelRequestEndEvent(Logged):
    """`span.model_request_end`: the call `model_request_start_id` ended."""

    type: Literal["span.model_request_end"]
    model_request_start_id: str
    is_error: bool = False
    model_usage: dict[str, int] = Field(default_factory=dict)


class ToolStartedEvent(Logged):
    """`corral.tool_started` (internal): the brain is about to run server-side call
    `tool_use_id`. Written before the side effect, so "already started" is read, not guessed."""

    type: Literal["corral.tool_started"]
    tool_use_id: str
    server_tool: str | None = None
    """A server-executed tool whose start counts in `usage.server_tool_use`."""


class LogFormatEvent(Logged):
    """`corral.log_format` (internal): from here on this log marks tool starts. A call logged
    before it was logged by an older brain, whose starts can only be inferred."""

    type: Literal["corral.log_format"]
    version: int


class HandsRemoteEvent(Logged):
    """`corral.hands_remote` (internal): this session's built-in tools run on a self-hosted
    worker, which answers them with `user.tool_result`; the brain never runs them."""

    type: Literal["corral.hands_remote"]


class ModelCostEvent(Logged):
    """`corral.model_cost` (internal): what the model request closed just before it cost at
    list price, in nano-dollars (exact, unlike the cents the wire shows), and the least the
    next request can cost (`floor_nanos`), which the budget check looks ahead by."""

    type: Literal["corral.model_cost"]
    nanos: int
    floor_nanos: int = 0


class BudgetSetEvent(Logged):
    """`corral.budget` (internal): the budget the session was created with (changes later
    are public `session.updated` events)."""

    type: Literal["corral.budget"]
    budget: dict[str, Any]


class WorkerLostEvent(Logged):
    """`corral.worker_lost` (internal): the lease of work item `work_id` expired, so a call
    its worker may have been running will never be answered by it."""

    type: Literal["corral.worker_lost"]
    work_id: str


class AgentThreadContextCompactedEvent(Logged):
    """`agent.thread_context_compacted`: from here on the model sees a summary of the earlier
    conversation instead of it (the log keeps every original event)."""

    type: Literal["agent.thread_context_compacted"]


class ContextSummaryEvent(Logged):
    """`corral.context_summary` (internal, appended with `agent.thread_context_compacted`):
    the summary that replaces the transcript's turns before `cut_turn` (an index counted over
    every turn the log ever made) and the first `cut_blocks` blocks of that turn, the
    estimated sizes before and after, and what the summarising request used, so a restarted
    brain builds the same context."""

    type: Literal["corral.context_summary"]
    summary: str
    cut_turn: int
    cut_blocks: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    model: str = ""
    model_usage: dict[str, int] = Field(default_factory=dict)


class SessionThreadCreatedEvent(Logged):
    """`session.thread_created`: a child thread was started (on the parent's log)."""

    type: Literal["session.thread_created"]
    agent_name: str = ""


class SessionThreadStatusRunningEvent(Logged):
    """`session.thread_status_running`: a child thread's status, cross-posted to the parent's
    log (its own log holds the `session.status_*` event with the same id); so are the other
    three below."""

    type: Literal["session.thread_status_running"]
    agent_name: str = ""


class SessionThreadStatusIdleEvent(Logged):
    """`session.thread_status_idle` (cross-post)."""

    type: Literal["session.thread_status_idle"]
    agent_name: str = ""
    stop_reason: StopReason | None = None


class SessionThreadStatusRescheduledEvent(Logged):
    """`session.thread_status_rescheduled` (cross-post)."""

    type: Literal["session.thread_status_rescheduled"]
    agent_name: str = ""


class SessionThreadStatusTerminatedEvent(Logged):
    """`session.thread_status_terminated` (cross-post)."""

    type: Literal["session.thread_status_terminated"]
    agent_name: str = ""


class AgentThreadMessageSentEvent(Logged):
    """`agent.thread_message_sent`: on the sender's log."""

    type: Literal["agent.thread_message_sent"]
    to_session_thread_id: str
    to_agent_name: str | None = None
    content: list[Block] = Field(default_factory=list)


class AgentThreadMessageReceivedEvent(Logged):
    """`agent.thread_message_received`: on the receiver's log; input for its model."""

    type: Literal["agent.thread_message_received"]
    from_session_thread_id: str
    from_agent_name: str | None = None
    content: list[Block] = Field(default_factory=list)


class ThreadRoleEvent(Logged):
    """`corral.thread_role` (internal): first event of a child thread's log: who it is and
    whose thread it is (`thread_id` is this log's session row id)."""

    type: Literal["corral.thread_role"]
    parent_session_id: str
    parent_thread_id: str
    thread_id: str
    agent_name: str


class RelayedEvent(Logged):
    """`corral.relayed` (internal): a child thread's events up to `seq` were cross-posted to
    its parent's log (and its turn closes before it answered as thread messages)."""

    type: Literal["corral.relayed"]
    seq: int


class ThreadProgressEvent(Logged):
    """`corral.thread_progress` (internal, on a parent's log): relayed after each turn close
    of child thread `thread_id` (after its reply): how many of the messages it received
    (its task included) it has answered or dropped, and whether it is terminated (`final`:
    it answers nothing more). A coordinator's wait reads from it whether a reply can come."""

    type: Literal["corral.thread_progress"]
    thread_id: str
    answered: int
    final: bool = False


LogEvent = Annotated[
    UserMessageEvent
    | UserInterruptEvent
    | UserToolConfirmationEvent
    | UserCustomToolResultEvent
    | UserToolResultEvent
    | SystemMessageEvent
    | UserDefineOutcomeEvent
    | AgentMessageEvent
    | AgentThinkingEvent
    | AgentToolUseEvent
    | AgentCustomToolUseEvent
    | AgentMcpToolUseEvent
    | AgentToolResultEvent
    | AgentMcpToolResultEvent
    | SessionStatusRunningEvent
    | SessionStatusIdleEvent
    | SessionStatusRescheduledEvent
    | SessionStatusTerminatedEvent
    | SessionErrorEvent
    | SessionUpdatedEvent
    | SpanModelRequestStartEvent
    | SpanModelRequestEndEvent
    | ToolStartedEvent
    | LogFormatEvent
    | HandsRemoteEvent
    | WorkerLostEvent
    | SessionUsageEvent
    | ModelCostEvent
    | BudgetSetEvent
    | AgentThreadContextCompactedEvent
    | ContextSummaryEvent
    | SessionThreadCreatedEvent
    | SessionThreadStatusRunningEvent
    | SessionThreadStatusIdleEvent
    | SessionThreadStatusRescheduledEvent
    | SessionThreadStatusTerminatedEvent
    | AgentThreadMessageSentEvent
    | AgentThreadMessageReceivedEvent
    | ThreadRoleEvent
    | RelayedEvent
    | ThreadProgressEvent,
    Field(discriminator="type"),
]
"""Every event a session log can hold, discriminated on `type`."""

LogEventType = Literal[
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
    "agent.custom_tool_use",
    "agent.mcp_tool_use",
    "agent.tool_result",
    "agent.mcp_tool_result",
    "session.status_running",
    "session.status_idle",
    "session.status_rescheduled",
    "session.status_terminated",
    "session.error",
    "session.updated",
    "span.model_request_start",
    "span.model_request_end",
    "corral.tool_started",
    "corral.log_format",
    "corral.hands_remote",
    "corral.worker_lost",
    "session.usage",
    "corral.model_cost",
    "corral.budget",
    "agent.thread_context_compacted",
    "corral.context_summary",
    "session.thread_created",
    "session.thread_status_running",
    "session.thread_status_idle",
    "session.thread_status_rescheduled",
    "session.thread_status_terminated",
    "agent.thread_message_sent",
    "agent.thread_message_received",
    "corral.thread_role",
    "corral.relayed",
    "corral.thread_progress",
]
"""The `type` tags of `LogEvent`, for code that builds event bodies."""

INTERNAL_EVENT_TYPES = frozenset(
    {
        "corral.tool_started",
        "corral.log_format",
        "corral.hands_remote",
        "corral.worker_lost",
        "corral.model_cost",
        "corral.budget",
        "corral.context_summary",
        "corral.thread_role",
        "corral.relayed",
        "corral.thread_progress",
    }
)
"""Brain bookkeeping kept in the log but never shown to clients (events.list, SSE): client
programs written for the hosted API must not meet event types it does not have."""

LOG_FORMAT_VERSION = 2
"""`corral.log_format` version written by this build (1 = logs without tool-start markers)."""

_LOG_EVENT: TypeAdapter[LogEvent] = TypeAdapter(LogEvent)


def _fields_by_type() -> dict[str, frozenset[str]]:
    union = get_args(LogEvent)[0]
    found: dict[str, frozenset[str]] = {}
    for model in get_args(union):
        for tag in get_args(model.model_fields["type"].annotation):
            found[tag] = frozenset(model.model_fields)
    return found


LOG_EVENT_FIELDS = _fields_by_type()
"""Event type -> the fields its model declares (`type`, `id`, `processed_at` included)."""


def parse_event(body: Mapping[str, Any]) -> LogEvent:
    """The typed form of a stored event body.

    Raises:
        pydantic.ValidationError: the body is not a well-formed log event (a bug upstream).
    """
    return _LOG_EVENT.validate_python(body)
