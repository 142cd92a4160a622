"""Client-sent event bodies (`events.send`, `initial_events`) and content blocks."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

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
