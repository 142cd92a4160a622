"""Compaction, the action: summarise the older turns of a conversation that outgrew its
model's context window, and log the summary so every later request (and every brain after a
restart) shows the summary instead of those turns. See docs/context.md.

The log is never rewritten: `agent.thread_context_compacted` marks the point for clients and
the internal `corral.context_summary` logged with it (one append, so both or neither) holds
the summary and where it cuts; `context.Transcript` applies it when it folds the log. A brain
that dies during the summary request logged nothing, so the next one simply compacts again.
"""

from __future__ import annotations

from typing import Any

from corral.brain import events as ev
from corral.brain import retry
from corral.brain.cost import usage_events
from corral.brain.credentials import credential_errors
from corral.brain.decide import Compact
from corral.brain.run import Run
from corral.brain.window import (
    BLOCK_TOKENS,
    choose_cut,
    estimate_tokens,
    fit_text,
    keep_tokens,
    render_for_summary,
    summary_text,
    summary_tokens,
)
from corral.context_window import ContextPolicy
from corral.models.base import ModelClient, ModelError, ModelRequest, ModelResponse

SUMMARISER_SYSTEM = (
    "You compact the conversation of an AI agent that has run out of context window. Write a "
    "summary the agent will read instead of the conversation, to continue the work without "
    "it. Keep everything it still needs: the user's goals and instructions, decisions made, "
    "facts learned (file paths, names, numbers, commands, errors), what was done with which "
    "tools and what came of it, what is unfinished and the next steps. Be terse; do not call "
    "tools and do not address the user."
)
INSTRUCTION = (
    "Summarise the conversation above for the agent that will continue it. Answer with the "
    "summary only."
)
_FRAME_TOKENS = 256
"""The summariser's system prompt, the instruction and the request's framing, generously."""
NOTHING_TO_CUT = (
    "There is nothing left to compact, and the request is still larger than the compaction "
    "threshold of the model's context window ({limit} tokens): the system prompt and tools "
    "alone may be too large for this model."
)


async def compact(run: Run, action: Compact) -> None:
    """Summarise the turns before the cut `window.choose_cut` picks; log the summary, or the
    failure and whether it will be retried (as a failed model call is)."""
    policy = run.context_policy
    assert policy is not None, "decide compacts only sessions with a context window"
    transcript, meter = run.transcript, run.state.context
    fixed = meter.next_request - meter.messages  # system prompt and tools, as last measured
    most = policy.limit - summary_tokens(policy.window) - fixed
    cut = choose_cut(transcript.turns, keep_tokens(policy.window), most)
    if cut is None:
        await stop_at_limit(run, NOTHING_TO_CUT.format(limit=policy.limit))
        return
    since = run.state.last_seq
    if action.attempt > 0 and not await retry.wait(run, action.attempt, since):
        return  # interrupted while waiting (decide closes the turn) or stopping (handed over)
    if run.state.status != "running":  # a turn starts (as call_model would say it)
        warnings = await credential_errors(run)
        await run.append(ev.event("session.status_running"), *warnings)
    turn, blocks = cut
    older = [*transcript.turns[:turn]]
    if blocks:
        older.append(
            {**transcript.turns[turn], "content": transcript.turns[turn]["content"][:blocks]}
        )
    kept = [*transcript.turns[turn:]]
    if blocks:
        kept[0] = {**kept[0], "content": kept[0]["content"][blocks:]}
    model = policy.compaction_model or str(run.agent["model"]["id"])
    request = _summary_request(model, policy, transcript.summary, older)
    cut_turn, before = transcript.dropped + turn, meter.next_request
    outcome = await _summarise(run, model, request, since)
    if outcome is None:
        return  # interrupted: decide closes the turn
    if isinstance(outcome, ModelError):
        await _record_failure(run, outcome, action.attempt)
        return
    summary, usage = outcome
    after = (
        estimate_tokens(summary_text(summary))
        + BLOCK_TOKENS
        + sum(estimate_tokens(t) + BLOCK_TOKENS for t in kept)
    )
    prices = run.deps.prices
    price = None if prices is None else prices.price_for(model)
    await run.append(
        ev.event("agent.thread_context_compacted"),
        ev.event(
            "corral.context_summary",
            summary=summary,
            cut_turn=cut_turn,
            cut_blocks=blocks,
            tokens_before=before,
            tokens_after=after,
            model=model,
            model_usage=usage,
        ),
        *usage_events(run.state, price, usage),
    )


async def stop_at_limit(run: Run, message: str | None = None) -> None:
    """End the turn with `compaction_limit_reached_error` (not a failed request)."""
    await run.append(
        ev.session_error(
            "compaction_limit_reached_error",
            message
            or "The context was compacted repeatedly without the model making progress; send "
            "a new message to continue.",
            "exhausted",
        ),
        ev.status_idle("retries_exhausted"),
    )


def _summary_request(
    model: str, policy: ContextPolicy, summary: str | None, older: list[dict[str, Any]]
) -> ModelRequest:
    """A request that fits the window: the conversation to summarise (its middle left out if
    it alone would not fit) and the instruction; no tools."""
    room = policy.window - summary_tokens(policy.window) - _FRAME_TOKENS
    conversation = fit_text(render_for_summary(summary, older), room)
    text = f"<conversation>\n{conversation}\n</conversation>\n\n{INSTRUCTION}"
    return ModelRequest(
        model=model,
        system=SUMMARISER_SYSTEM,
        messages=[{"role": "user", "content": [{"type": "text", "text": text}]}],
        tools=[],
        max_tokens=summary_tokens(policy.window),
        cache_breakpoints=False,
    )


async def _summarise(
    run: Run, model: str, request: ModelRequest, since: int
) -> tuple[str, dict[str, int]] | ModelError | None:
    """(summary, usage), the failure, or None when an interrupt cancelled the request."""
    try:
        client = run.deps.models.client_for(model)
    except ValueError as exc:
        return ModelError("invalid_request", str(exc), retryable=False)

    async def work() -> ModelResponse | ModelError:
        try:
            return await _response(client, request)
        except ModelError as exc:
            return exc

    outcome, _ = await run.until_interrupt(work, after=since)
    if outcome is None or isinstance(outcome, ModelError):
        return outcome
    text = "\n".join(
        str(b.get("text", "")) for b in outcome.content if b.get("type") == "text"
    ).strip()
    if not text:
        return ModelError("request_failed", "the summary request returned no text", retryable=True)
    usage = outcome.usage
    return text, {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    }


async def _response(client: ModelClient, request: ModelRequest) -> ModelResponse:
    """The completed response (a summary is not an agent message: no previews)."""
    async for item in client.stream(request):
        if isinstance(item, ModelResponse):
            return item
    raise ModelError("request_failed", "the model stream ended without a response", retryable=True)


async def _record_failure(run: Run, error: ModelError, attempt: int) -> None:
    planned = retry.plan(run.deps.settings, error, attempt, run.state.retry_since)
    if isinstance(planned, retry.GiveUp):
        run.telemetry.model_failed(planned.error, "exhausted", attempt)
        await run.append(
            ev.model_error(planned.error, "exhausted"), ev.status_idle("retries_exhausted")
        )
    else:
        run.retry_delay = planned.delay
        run.telemetry.model_failed(error, "retrying", attempt)
        await run.append(ev.event("session.status_rescheduled"), ev.model_error(error, "retrying"))
