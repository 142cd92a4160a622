"""`event(kind, **fields)`: a new server event body, its fields typed per event type.

Written by `corral.brain.event_builder_gen` from `corral.wire.events` (do not edit; a test
fails when it is stale). Nested models are plain dicts on the write side.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict, overload

from typing_extensions import Unpack

from corral.ids import new_id, now_rfc3339
from corral.wire.events import LOG_EVENT_FIELDS, LogEventType


class UnknownEventField(TypeError):
    """A brain built an event with a field its type does not have (a misspelling): stored, it
    would be ignored when read back, and its default would silently take its place."""


class CommonFields(TypedDict, total=False):
    """Fields every logged event has (`Logged`); no id (or None) gets a fresh one."""

    id: str | None
    processed_at: str | None
    session_thread_id: str | None


class UserMessageFields(CommonFields, total=False):
    """Fields of `user.message` (`UserMessageEvent`)."""

    content: list[dict[str, Any]]


class UserInterruptFields(CommonFields, total=False):
    """Fields of `user.interrupt` (`UserInterruptEvent`)."""


class UserToolConfirmationFields(CommonFields, total=False):
    """Fields of `user.tool_confirmation` (`UserToolConfirmationEvent`)."""

    tool_use_id: str
    result: Literal["allow", "deny"]
    deny_message: str | None


class UserCustomToolResultFields(CommonFields, total=False):
    """Fields of `user.custom_tool_result` (`UserCustomToolResultEvent`)."""

    custom_tool_use_id: str
    content: list[dict[str, Any]] | None
    is_error: bool | None


class UserToolResultFields(CommonFields, total=False):
    """Fields of `user.tool_result` (`UserToolResultEvent`)."""

    tool_use_id: str
    content: list[dict[str, Any]] | None
    is_error: bool | None


class SystemMessageFields(CommonFields, total=False):
    """Fields of `system.message` (`SystemMessageEvent`)."""

    content: list[dict[str, Any]]


class UserDefineOutcomeFields(CommonFields, total=False):
    """Fields of `user.define_outcome` (`UserDefineOutcomeEvent`)."""


class AgentMessageFields(CommonFields, total=False):
    """Fields of `agent.message` (`AgentMessageEvent`)."""

    content: list[dict[str, Any]]


class AgentThinkingFields(CommonFields, total=False):
    """Fields of `agent.thinking` (`AgentThinkingEvent`)."""


class AgentToolUseFields(CommonFields, total=False):
    """Fields of `agent.tool_use` (`AgentToolUseEvent`)."""

    name: str
    input: dict[str, Any]
    evaluated_permission: Literal["allow", "ask", "deny"]
    evaluation: dict[str, Any] | None


class AgentCustomToolUseFields(CommonFields, total=False):
    """Fields of `agent.custom_tool_use` (`AgentCustomToolUseEvent`)."""

    name: str
    input: dict[str, Any]


class AgentMcpToolUseFields(CommonFields, total=False):
    """Fields of `agent.mcp_tool_use` (`AgentMcpToolUseEvent`)."""

    name: str
    mcp_server_name: str
    input: dict[str, Any]
    evaluated_permission: Literal["allow", "ask", "deny"]
    evaluation: dict[str, Any] | None


class AgentToolResultFields(CommonFields, total=False):
    """Fields of `agent.tool_result` (`AgentToolResultEvent`)."""

    tool_use_id: str
    content: list[dict[str, Any]] | None
    is_error: bool | None


class AgentMcpToolResultFields(CommonFields, total=False):
    """Fields of `agent.mcp_tool_result` (`AgentMcpToolResultEvent`)."""

    mcp_tool_use_id: str
    content: list[dict[str, Any]] | None
    is_error: bool | None


class SessionStatusRunningFields(CommonFields, total=False):
    """Fields of `session.status_running` (`SessionStatusRunningEvent`)."""


class SessionStatusIdleFields(CommonFields, total=False):
    """Fields of `session.status_idle` (`SessionStatusIdleEvent`)."""

    stop_reason: dict[str, Any]


class SessionStatusRescheduledFields(CommonFields, total=False):
    """Fields of `session.status_rescheduled` (`SessionStatusRescheduledEvent`)."""


class SessionStatusTerminatedFields(CommonFields, total=False):
    """Fields of `session.status_terminated` (`SessionStatusTerminatedEvent`)."""


class SessionErrorFields(CommonFields, total=False):
    """Fields of `session.error` (`SessionErrorEvent`)."""

    error: dict[str, Any]


class SessionUpdatedFields(CommonFields, total=False):
    """Fields of `session.updated` (`SessionUpdatedEvent`)."""

    budget: dict[str, Any] | None


class SpanModelRequestStartFields(CommonFields, total=False):
    """Fields of `span.model_request_start` (`SpanModelRequestStartEvent`)."""


class SpanModelRequestEndFields(CommonFields, total=False):
    """Fields of `span.model_request_end` (`SpanModelRequestEndEvent`)."""

    model_request_start_id: str
    is_error: bool
    model_usage: dict[str, int]


class CorralToolStartedFields(CommonFields, total=False):
    """Fields of `corral.tool_started` (`ToolStartedEvent`)."""

    tool_use_id: str
    server_tool: str | None


class CorralLogFormatFields(CommonFields, total=False):
    """Fields of `corral.log_format` (`LogFormatEvent`)."""

    version: int


class CorralHandsRemoteFields(CommonFields, total=False):
    """Fields of `corral.hands_remote` (`HandsRemoteEvent`)."""


class CorralWorkerLostFields(CommonFields, total=False):
    """Fields of `corral.worker_lost` (`WorkerLostEvent`)."""

    work_id: str


class SessionUsageFields(CommonFields, total=False):
    """Fields of `session.usage` (`SessionUsageEvent`)."""

    usage: dict[str, Any]
    budget: dict[str, Any] | None


class CorralModelCostFields(CommonFields, total=False):
    """Fields of `corral.model_cost` (`ModelCostEvent`)."""

    nanos: int
    floor_nanos: int


class CorralBudgetFields(CommonFields, total=False):
    """Fields of `corral.budget` (`BudgetSetEvent`)."""

    budget: dict[str, Any]


class AgentThreadContextCompactedFields(CommonFields, total=False):
    """Fields of `agent.thread_context_compacted` (`AgentThreadContextCompactedEvent`)."""


class CorralContextSummaryFields(CommonFields, total=False):
    """Fields of `corral.context_summary` (`ContextSummaryEvent`)."""

    summary: str
    cut_turn: int
    cut_blocks: int
    tokens_before: int
    tokens_after: int
    model: str
    model_usage: dict[str, int]


class SessionThreadCreatedFields(CommonFields, total=False):
    """Fields of `session.thread_created` (`SessionThreadCreatedEvent`)."""

    agent_name: str


class SessionThreadStatusRunningFields(CommonFields, total=False):
    """Fields of `session.thread_status_running` (`SessionThreadStatusRunningEvent`)."""

    agent_name: str


class SessionThreadStatusIdleFields(CommonFields, total=False):
    """Fields of `session.thread_status_idle` (`SessionThreadStatusIdleEvent`)."""

    agent_name: str
    stop_reason: dict[str, Any] | None


class SessionThreadStatusRescheduledFields(CommonFields, total=False):
    """Fields of `session.thread_status_rescheduled` (`SessionThreadStatusRescheduledEvent`)."""

    agent_name: str


class SessionThreadStatusTerminatedFields(CommonFields, total=False):
    """Fields of `session.thread_status_terminated` (`SessionThreadStatusTerminatedEvent`)."""

    agent_name: str


class AgentThreadMessageSentFields(CommonFields, total=False):
    """Fields of `agent.thread_message_sent` (`AgentThreadMessageSentEvent`)."""

    to_session_thread_id: str
    to_agent_name: str | None
    content: list[dict[str, Any]]


class AgentThreadMessageReceivedFields(CommonFields, total=False):
    """Fields of `agent.thread_message_received` (`AgentThreadMessageReceivedEvent`)."""

    from_session_thread_id: str
    from_agent_name: str | None
    content: list[dict[str, Any]]


class CorralThreadRoleFields(CommonFields, total=False):
    """Fields of `corral.thread_role` (`ThreadRoleEvent`)."""

    parent_session_id: str
    parent_thread_id: str
    thread_id: str
    agent_name: str


class CorralRelayedFields(CommonFields, total=False):
    """Fields of `corral.relayed` (`RelayedEvent`)."""

    seq: int


class CorralThreadProgressFields(CommonFields, total=False):
    """Fields of `corral.thread_progress` (`ThreadProgressEvent`)."""

    thread_id: str
    answered: int
    final: bool


@overload
def event(kind: Literal["user.message"], **fields: Unpack[UserMessageFields]) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["user.interrupt"], **fields: Unpack[UserInterruptFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["user.tool_confirmation"], **fields: Unpack[UserToolConfirmationFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["user.custom_tool_result"], **fields: Unpack[UserCustomToolResultFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["user.tool_result"], **fields: Unpack[UserToolResultFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["system.message"], **fields: Unpack[SystemMessageFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["user.define_outcome"], **fields: Unpack[UserDefineOutcomeFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.message"], **fields: Unpack[AgentMessageFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.thinking"], **fields: Unpack[AgentThinkingFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.tool_use"], **fields: Unpack[AgentToolUseFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.custom_tool_use"], **fields: Unpack[AgentCustomToolUseFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.mcp_tool_use"], **fields: Unpack[AgentMcpToolUseFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.tool_result"], **fields: Unpack[AgentToolResultFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.mcp_tool_result"], **fields: Unpack[AgentMcpToolResultFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.status_running"], **fields: Unpack[SessionStatusRunningFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.status_idle"], **fields: Unpack[SessionStatusIdleFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.status_rescheduled"], **fields: Unpack[SessionStatusRescheduledFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.status_terminated"], **fields: Unpack[SessionStatusTerminatedFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.error"], **fields: Unpack[SessionErrorFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.updated"], **fields: Unpack[SessionUpdatedFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["span.model_request_start"], **fields: Unpack[SpanModelRequestStartFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["span.model_request_end"], **fields: Unpack[SpanModelRequestEndFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.tool_started"], **fields: Unpack[CorralToolStartedFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.log_format"], **fields: Unpack[CorralLogFormatFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.hands_remote"], **fields: Unpack[CorralHandsRemoteFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.worker_lost"], **fields: Unpack[CorralWorkerLostFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.usage"], **fields: Unpack[SessionUsageFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.model_cost"], **fields: Unpack[CorralModelCostFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.budget"], **fields: Unpack[CorralBudgetFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.thread_context_compacted"],
    **fields: Unpack[AgentThreadContextCompactedFields],
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.context_summary"], **fields: Unpack[CorralContextSummaryFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.thread_created"], **fields: Unpack[SessionThreadCreatedFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.thread_status_running"],
    **fields: Unpack[SessionThreadStatusRunningFields],
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.thread_status_idle"], **fields: Unpack[SessionThreadStatusIdleFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.thread_status_rescheduled"],
    **fields: Unpack[SessionThreadStatusRescheduledFields],
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["session.thread_status_terminated"],
    **fields: Unpack[SessionThreadStatusTerminatedFields],
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.thread_message_sent"], **fields: Unpack[AgentThreadMessageSentFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["agent.thread_message_received"],
    **fields: Unpack[AgentThreadMessageReceivedFields],
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.thread_role"], **fields: Unpack[CorralThreadRoleFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.relayed"], **fields: Unpack[CorralRelayedFields]
) -> dict[str, Any]: ...


@overload
def event(
    kind: Literal["corral.thread_progress"], **fields: Unpack[CorralThreadProgressFields]
) -> dict[str, Any]: ...


def event(kind: LogEventType, **fields: Any) -> dict[str, Any]:
    """A new server event of type `kind` with a fresh id (unless `id` is given).

    Raises:
        UnknownEventField: a field `kind`'s model does not declare.
    """
    unknown = fields.keys() - LOG_EVENT_FIELDS[kind]
    if unknown:
        raise UnknownEventField(f"{kind} has no field {', '.join(sorted(unknown))}")
    return {
        "id": fields.pop("id", None) or new_id("sevt"),
        "type": kind,
        "processed_at": now_rfc3339(),
        **fields,
    }
