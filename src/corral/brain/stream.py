"""Stream one model response, publishing never-stored previews (`event_start`/`event_delta`)."""

from __future__ import annotations

from typing import Any

from corral.brain.run import Run
from corral.ids import new_id
from corral.models.base import (
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ThinkingStarted,
)


async def stream_response(run: Run, client: ModelClient, request: ModelRequest) -> ModelResponse:
    """The completed response; text/thinking blocks carry `_event_id` = their preview id."""
    store, session_id = run.deps.store, run.fence.session_id
    preview_ids: dict[int, str] = {}
    async for item in client.stream(request):
        if isinstance(item, ModelResponse):
            return _with_ids(item, preview_ids)
        if isinstance(item, (TextDelta, ThinkingStarted)):
            kind = "agent.message" if isinstance(item, TextDelta) else "agent.thinking"
            if item.index not in preview_ids:
                preview_ids[item.index] = new_id("sevt")
                await store.publish_preview(
                    session_id,
                    {
                        "type": "event_start",
                        "event": {"type": kind, "id": preview_ids[item.index]},
                    },
                )
            if isinstance(item, TextDelta) and item.text:
                await store.publish_preview(
                    session_id,
                    {
                        "type": "event_delta",
                        "event_id": preview_ids[item.index],
                        "delta": {
                            "type": "content_delta",
                            "index": 0,
                            "content": {"type": "text", "text": item.text},
                        },
                    },
                )
    raise ModelError("request_failed", "the model stream ended without a response", retryable=True)


def _with_ids(response: ModelResponse, preview_ids: dict[int, str]) -> ModelResponse:
    content: list[dict[str, Any]] = []
    for index, block in enumerate(response.content):
        if index in preview_ids:
            block = {**block, "_event_id": preview_ids[index]}
        content.append(block)
    return ModelResponse(content=content, stop_reason=response.stop_reason, usage=response.usage)
