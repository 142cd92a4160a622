"""The seam between the brain and a language model; no HTTP or storage knowledge here.

A provider turns a `ModelRequest` (Anthropic Messages shape, our canonical form) into a stream
of `ModelStreamEvent`s that ends with exactly one `ModelResponse`. Providers translate to
other wire formats (OpenAI-compatible) themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

ModelErrorKind = Literal[
    "overloaded", "rate_limited", "request_failed", "invalid_request", "authentication"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRequest:
    """One inference call, built by the brain from the session log."""

    model: str
    system: str | None
    messages: list[dict[str, Any]]
    """Anthropic Messages `messages`: alternating user/assistant turns of content blocks."""
    tools: list[dict[str, Any]]
    """Anthropic tool definitions: `{name, description, input_schema}`."""
    max_tokens: int = 8192
    cache_breakpoints: bool = True
    """Mark the stable prefix (tools, system, history) for prompt caching where supported."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelUsage:
    """Token counts of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDelta:
    """A piece of text for content block `index` of the response being streamed."""

    index: int
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingStarted:
    """The model began a thinking block (previews carry no thinking text)."""

    index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelResponse:
    """The completed response; always the last item of a stream."""

    content: list[dict[str, Any]]
    """Anthropic content blocks: `text`, `tool_use {id, name, input}`, `thinking`."""
    stop_reason: str
    usage: ModelUsage = field(default_factory=ModelUsage)


ModelStreamEvent = TextDelta | ThinkingStarted | ModelResponse


class ModelError(Exception):
    """A model call failed; `retryable` errors are retried by the brain with backoff."""

    def __init__(
        self,
        kind: ModelErrorKind,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ModelErrorKind = kind
        self.message = message
        self.retryable = retryable
        self.status = status
        """The provider's HTTP status, when it answered with one (None: no answer, an error
        inside a streamed answer, or no call made)."""
        self.retry_after = retry_after
        """Seconds the provider asked us to wait before calling again (`retry-after` or its
        rate-limit reset headers); None: it did not say, the brain backs off on its own."""


class ModelClient(Protocol):
    """A language model the brain can stream from."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream one response.

        Yields `TextDelta`/`ThinkingStarted` previews, then exactly one `ModelResponse`.

        Raises:
            ModelError: the provider failed; `retryable` tells the brain whether to retry.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...
