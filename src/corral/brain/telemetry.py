"""What a brain reports about one run: metrics and a log line per turn from the events it
appends, and spans around its actions (model requests, tool calls) under a span per turn.

It only observes: nothing here decides, and a failure here never stops the brain.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

from corral.brain.decide import Action, CallModel, RunTool
from corral.brain.state import SessionState
from corral.ids import parse_rfc3339, utc_now
from corral.models.base import ModelError
from corral.observability.logs import fields
from corral.observability.metrics import (
    APPEND_LATENCY,
    MODEL_LATENCY,
    MODEL_REQUESTS,
    MODEL_TOKENS,
    TOOL_CALLS,
    TURN_DURATION,
    TURNS,
)
from corral.observability.tracing import SESSION_ID, mark_error, span, tracer
from corral.session.log import StoredEvent

log = logging.getLogger("corral.turn")
USAGE_KINDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_input_tokens": "cache_read",
    "cache_creation_input_tokens": "cache_write",
}
"""`model_usage` keys -> the `kind` label of `corral_model_tokens_total`."""


class RunTelemetry:
    """Per run of a brain on one session."""

    def __init__(self, session_id: str, model: str) -> None:
        self.session_id = session_id
        self.model = model
        self._turn: Span | None = None
        self._model_starts: dict[str, float] = {}

    @contextmanager
    def acting(self, action: Action) -> Iterator[None]:
        """Around one action: the turn's span is current (made on the first action of a
        turn), with a child span for a model request or a tool call."""
        if self._turn is None:
            self._turn = tracer().start_span(
                "corral.turn", attributes={SESSION_ID: self.session_id}
            )
        with trace.use_span(self._turn, end_on_exit=False), self._action_span(action):
            yield

    def _action_span(self, action: Action) -> AbstractContextManager[Any]:
        match action:
            case CallModel():
                return span(
                    "corral.model_request",
                    self.session_id,
                    **{"gen_ai.request.model": self.model, "corral.attempt": action.attempt},
                )
            case RunTool(call=call):
                return span(
                    "corral.tool_call",
                    self.session_id,
                    **{
                        "corral.tool.name": call.name,
                        "corral.tool.kind": call.kind,
                        "corral.mcp.server": call.server or None,
                    },
                )
        return nullcontext()

    def appended(
        self, state: SessionState, stored: Sequence[StoredEvent], seconds: float
    ) -> str | None:
        """Count what was just appended (and applied to `state`); the stop reason when it
        closed a turn (an idle other than `requires_action`), else None."""
        APPEND_LATENCY.labels("brain").observe(seconds)
        closed = None
        for event in stored:
            body = event.body
            match body["type"]:
                case "span.model_request_start":
                    self._model_starts[str(body["id"])] = time.perf_counter()
                case "span.model_request_end":
                    self._model_end(body)
                case "agent.tool_result" | "agent.mcp_tool_result":
                    self._tool_result(state, body)
                case "session.status_idle":
                    reason = str((body.get("stop_reason") or {}).get("type", "end_turn"))
                    if reason != "requires_action":
                        closed = reason
        return closed

    def _model_end(self, body: dict[str, Any]) -> None:
        started = self._model_starts.pop(str(body.get("model_request_start_id")), None)
        if started is not None:
            MODEL_LATENCY.labels(self.model).observe(time.perf_counter() - started)
        failed = bool(body.get("is_error"))
        MODEL_REQUESTS.labels(self.model, "error" if failed else "ok").inc()
        current = trace.get_current_span()
        usage = body.get("model_usage") or {}
        for key, kind in USAGE_KINDS.items():
            count = int(usage.get(key) or 0)
            if count:
                MODEL_TOKENS.labels(self.model, kind).inc(count)
            current.set_attribute(f"gen_ai.usage.{key}", count)
        if failed:
            mark_error(current, "the model request failed or was interrupted")

    def _tool_result(self, state: SessionState, body: dict[str, Any]) -> None:
        use_id = body.get("tool_use_id") or body.get("mcp_tool_use_id")
        call = state.calls.get(str(use_id))
        if call is None:
            return
        tool = "mcp" if call.kind == "mcp" else call.name
        if call.confirmation == "deny":
            outcome = "denied"
        else:
            outcome = "error" if body.get("is_error") else "ok"
        TOOL_CALLS.labels(tool, outcome).inc()
        if outcome != "ok":
            mark_error(trace.get_current_span(), f"tool call {outcome}")

    def model_failed(self, error: ModelError, retry_status: str, attempt: int) -> None:
        """A warning for a failed model call, with the provider's status and message: the
        session's `session.error` carries the same message, but an operator reads the log."""
        log.warning(
            "model call failed (%s): %s",
            retry_status,
            error.message,
            extra=fields(
                kind="model_error",
                session_id=self.session_id,
                model=self.model,
                status=error.status,
                error_kind=error.kind,
                retry_status=retry_status,
                attempt=attempt,
            ),
        )

    def turn_closed(self, state: SessionState, stop_reason: str) -> None:
        """Metrics, span end and the log line of a turn closed by this brain. The turn comes
        from the folded log (`state.closed_turn`), so a turn that moved between brains is
        reported whole."""
        turn = state.closed_turn
        seconds = 0.0
        if turn.started_at is not None:
            started = parse_rfc3339(turn.started_at)
            seconds = max((utc_now() - started).total_seconds(), 0.0)
        tokens = {key: int(turn.usage.get(key) or 0) for key in USAGE_KINDS}
        TURNS.labels(stop_reason).inc()
        TURN_DURATION.observe(seconds)
        log.info(
            "turn closed: %s",
            stop_reason,
            extra=fields(
                kind="turn",
                session_id=self.session_id,
                stop_reason=stop_reason,
                duration_ms=round(seconds * 1000, 1),
                model=self.model,
                model_requests=turn.model_requests,
                **tokens,
            ),
        )
        if self._turn is not None:
            self._turn.set_attribute("corral.stop_reason", stop_reason)
            self._turn.set_attribute("corral.turn.closed", True)
            self._turn.end()
            self._turn = None

    def finish(self) -> None:
        """The run is over: a turn still open here (paused for the client, or continued by
        another brain) ends its span; the rest of the turn gets a span of its own."""
        if self._turn is not None:
            self._turn.set_attribute("corral.turn.closed", False)
            self._turn.end()
            self._turn = None
