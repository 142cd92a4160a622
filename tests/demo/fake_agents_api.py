"""A tiny in-process Managed Agents API behind an `httpx2.MockTransport`, for the demo runner.

It implements just what `run_demo` calls (environments, agents, sessions, events send/list/stream)
and runs `ScriptedModel` as its brain, so the runner's SDK usage is exercised without a server.
The SSE stream is a lazy generator: the runner's sends, made while it iterates, advance the brain.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2

from corral.demo.story import incident_story
from corral.models.base import ModelRequest, ModelResponse, ModelStreamEvent
from corral.models.scripted import ScriptedModel

SESSION = "sesn_demo"
NOW = "2026-04-22T02:45:00Z"


class FakeAgentsApi:
    """Records every request; `drop_first_stream_after` closes the first SSE stream early."""

    def __init__(self, *, drop_first_stream_after: int | None = None) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.agent: dict[str, Any] = {}
        self.messages: list[dict[str, Any]] = []
        self.waiting: dict[str, str] = {}  # custom tool use event id -> tool_use block id
        self.results: list[dict[str, Any]] = []
        self.usage = {"input_tokens": 0, "output_tokens": 0}
        self.streams = 0
        self._drop = drop_first_stream_after

    def transport(self) -> httpx2.MockTransport:
        return httpx2.MockTransport(self._handle)

    def _handle(self, request: httpx2.Request) -> httpx2.Response:
        method, path = request.method, request.url.path
        body = json.loads(request.content) if request.content else None
        self.requests.append((method, path, body))
        if (method, path) == ("POST", "/v1/environments"):
            return httpx2.Response(200, json={"id": "env_demo", "type": "environment", **body})
        if (method, path) == ("POST", "/v1/agents"):
            self.agent = body
            return httpx2.Response(200, json={"id": "agent_demo", "type": "agent", **body})
        if (method, path) == ("POST", "/v1/sessions"):
            return httpx2.Response(200, json={"id": SESSION, "type": "session", "status": "idle"})
        if (method, path) == ("GET", f"/v1/sessions/{SESSION}"):
            return httpx2.Response(200, json={"id": SESSION, "usage": self.usage})
        if path == f"/v1/sessions/{SESSION}/events/stream":
            self.streams += 1
            limit = self._drop if self.streams == 1 else None
            # The cursor is taken now, at connect time: a live tail sees only later events.
            stream = self._sse(len(self.events), limit)
            return httpx2.Response(
                200, headers={"content-type": "text/event-stream"}, content=stream
            )
        if (method, path) == ("POST", f"/v1/sessions/{SESSION}/events"):
            return httpx2.Response(200, json={"data": [self._accept(e) for e in body["events"]]})
        if (method, path) == ("GET", f"/v1/sessions/{SESSION}/events"):
            return httpx2.Response(200, json={"data": self.events, "next_page": None})
        return httpx2.Response(
            404, json={"type": "error", "error": {"type": "not_found_error", "message": path}}
        )

    def _sse(self, cursor: int, limit: int | None) -> Iterator[bytes]:
        sent = 0
        while cursor < len(self.events) and (limit is None or sent < limit):
            event = self.events[cursor]
            cursor, sent = cursor + 1, sent + 1
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()

    def _emit(self, type_: str, **fields: Any) -> dict[str, Any]:
        event = {"id": f"sevt_{len(self.events):04d}", "type": type_, "processed_at": NOW, **fields}
        self.events.append(event)
        return event

    def _accept(self, event: dict[str, Any]) -> dict[str, Any]:
        stored = self._emit(
            **{"type_": event["type"], **{k: v for k, v in event.items() if k != "type"}}
        )
        if event["type"] == "user.message":
            self.messages.append({"role": "user", "content": event["content"]})
            self._run_model()
        elif event["type"] == "user.custom_tool_result":
            block_id = self.waiting.pop(event["custom_tool_use_id"])
            self.results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block_id,
                    "content": event["content"],
                    "is_error": event["is_error"],
                }
            )
            if not self.waiting:
                self.messages.append({"role": "user", "content": self.results})
                self.results = []
                self._run_model()
        return stored

    def _run_model(self) -> None:
        self._emit("session.status_running")
        start = self._emit("span.model_request_start")
        tools = [
            {k: v for k, v in t.items() if k != "type"}
            for t in self.agent["tools"]
            if t["type"] == "custom"
        ]
        request = ModelRequest(
            model=self.agent["model"],
            system=self.agent["system"],
            messages=list(self.messages),
            tools=tools,
        )

        async def call() -> list[ModelStreamEvent]:
            return [e async for e in ScriptedModel(story=incident_story).stream(request)]

        response = anyio.run(call)[-1]
        assert isinstance(response, ModelResponse)
        self.messages.append({"role": "assistant", "content": response.content})
        for block in response.content:
            if block["type"] == "text":
                self._emit("agent.message", content=[block])
            else:
                use = self._emit("agent.custom_tool_use", name=block["name"], input=block["input"])
                self.waiting[use["id"]] = block["id"]
        usage = {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        for key in self.usage:
            self.usage[key] += usage[key]
        self._emit("span.model_request_end", model_request_start_id=start["id"], model_usage=usage)
        reason: dict[str, Any] = {"type": "end_turn"}
        if self.waiting:
            reason = {"type": "requires_action", "event_ids": list(self.waiting)}
        self._emit("session.status_idle", stop_reason=reason)
