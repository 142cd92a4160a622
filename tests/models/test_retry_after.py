"""The wait a provider asks for, read from its headers: a table of header sets, then both
providers carrying it on their `ModelError` from a real 429 of the wire-level fake."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from corral.models.anthropic import AnthropicClient
from corral.models.base import ModelError
from corral.models.openai_compat import OpenAICompatClient
from corral.models.retry_after import go_duration, requested_wait
from tests.fakes.messages_server import ErrorReply, FakeModelServer, ScriptedTurns
from tests.models.support import drain, make_request

NOW = datetime(2026, 12, 2, 0, 30, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("headers", "wait"),
    [
        ({}, None),
        ({"retry-after": "30"}, 30.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "0"}, 0.0),
        ({"retry-after": "Wed, 02 Dec 2026 00:30:45 GMT"}, 45.0),
        ({"retry-after": "Wed, 02 Dec 2026 00:29:00 GMT"}, 0.0),  # already past
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-5"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "2500"}, 2.5),
        ({"retry-after-ms": "2500", "retry-after": "30"}, 2.5),  # the precise one wins
        ({"retry-after-ms": "x", "retry-after": "3"}, 3.0),
        ({"retry-after": "3", "anthropic-ratelimit-requests-reset": "2026-12-02T00:31:00Z"}, 3.0),
        # Anthropic: RFC 3339 reset times of the limits that are used up
        ({"anthropic-ratelimit-requests-reset": "2026-12-02T00:30:20Z"}, 20.0),
        ({"anthropic-ratelimit-tokens-reset": "2026-12-02T00:30:07.5+00:00"}, 7.5),
        (
            {
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": "2026-12-02T00:30:05Z",
                "anthropic-ratelimit-input-tokens-remaining": "0",
                "anthropic-ratelimit-input-tokens-reset": "2026-12-02T00:30:12Z",
                "anthropic-ratelimit-output-tokens-remaining": "8000",
                "anthropic-ratelimit-output-tokens-reset": "2026-12-02T00:31:00Z",
            },
            12.0,
        ),
        (
            {
                "anthropic-ratelimit-requests-remaining": "49",
                "anthropic-ratelimit-requests-reset": "2026-12-02T00:30:05Z",
            },
            None,
        ),
        ({"anthropic-ratelimit-requests-reset": "yesterday"}, None),
        ({"anthropic-ratelimit-requests-reset": "2026-12-02T00:30:05"}, None),  # no zone
        # OpenAI-compatible: Go durations
        ({"x-ratelimit-reset-requests": "1s"}, 1.0),
        ({"x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        (
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "20ms",
                "x-ratelimit-remaining-tokens": "0",
                "x-ratelimit-reset-tokens": "1m30s",
            },
            90.0,
        ),
        (
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "2s",
                "x-ratelimit-remaining-tokens": "1000",
                "x-ratelimit-reset-tokens": "6m0s",
            },
            2.0,
        ),
        ({"x-ratelimit-reset-requests": "later"}, None),
    ],
)
def test_requested_wait(headers: dict[str, str], wait: float | None) -> None:
    assert requested_wait(headers, NOW) == (pytest.approx(wait) if wait is not None else None)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("250ms", 0.25),
        ("1.5s", 1.5),
        ("15us", 15e-6),
        ("", None),
        ("1x", None),
        ("s", None),
        ("1s junk", None),
    ],
)
def test_go_duration(text: str, seconds: float | None) -> None:
    assert go_duration(text) == (pytest.approx(seconds) if seconds is not None else None)


RATE_LIMITED = ErrorReply(status=429, headers={"retry-after": "17"})


@pytest.mark.anyio
async def test_the_anthropic_provider_carries_the_wait_on_its_error(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns([RATE_LIMITED, ErrorReply(status=529)])
    client = AnthropicClient("test-key", fake.url)
    try:
        waits = [await _failed_wait(client) for _ in range(2)]
    finally:
        await client.aclose()
    assert waits == [(17.0, "rate_limited"), (None, "overloaded")]


@pytest.mark.anyio
async def test_the_openai_provider_carries_the_wait_on_its_error(fake: FakeModelServer) -> None:
    fake.handler = ScriptedTurns([RATE_LIMITED, ErrorReply(status=503)])
    client = OpenAICompatClient(fake.openai_url)
    try:
        waits = [await _failed_wait(client) for _ in range(2)]
    finally:
        await client.aclose()
    assert waits == [(17.0, "rate_limited"), (None, "request_failed")]


async def _failed_wait(client: AnthropicClient | OpenAICompatClient) -> tuple[float | None, str]:
    with pytest.raises(ModelError) as caught:
        await drain(client, make_request())
    return caught.value.retry_after, caught.value.kind
