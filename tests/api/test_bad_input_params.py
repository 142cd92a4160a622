"""Bad list/read parameters and bodies that are not JSON objects, through the official SDK.

Each case names the exception class the SDK raises and the parameter the message must name;
nothing a refused request carried may be stored.
"""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.api.bad_input_support import (
    MODEL,
    Ids,
    get,
    post,
    refused,
)
from tests.api.helpers import events, make_session

# ---- list and read parameters -----------------------------------------------------------------

LISTS = [
    "/v1/agents",
    "/v1/environments",
    "/v1/sessions",
    "/v1/sessions/@/events",
    "/v1/agents/@/versions",
]


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize("limit", ["0", "10000", "abc", "-1", "1.5"])
def test_list_limit_out_of_range(
    client: anthropic.Anthropic, ids: Ids, path: str, limit: str
) -> None:
    refused(anthropic.BadRequestError, get(client, ids.fill(path), limit=limit), "limit")


@pytest.mark.parametrize("path", LISTS)
def test_list_page_cursor_the_server_never_issued(
    client: anthropic.Anthropic, ids: Ids, path: str
) -> None:
    """A made-up cursor must not read as "the first page" or "no more pages"."""
    refused(anthropic.BadRequestError, get(client, ids.fill(path), page="garbage!"), "page")


@pytest.mark.parametrize(
    ("path", "cursor"),
    [
        ("/v1/sessions/@/events", "page_c2VxOjk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5"),  # seq:999…9 (22)
        ("/v1/agents/@/versions", "9" * 25),
        ("/v1/agents/@/versions", "²"),  # str.isdigit() says yes, int() says no
    ],
)
def test_list_page_cursor_that_is_not_a_64_bit_number(
    client: anthropic.Anthropic, ids: Ids, path: str, cursor: str
) -> None:
    refused(anthropic.BadRequestError, get(client, ids.fill(path), page=cursor), "page")


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/@/events"])
def test_list_order_must_be_asc_or_desc(client: anthropic.Anthropic, ids: Ids, path: str) -> None:
    refused(anthropic.BadRequestError, get(client, ids.fill(path), order="sideways"), "order")


@pytest.mark.parametrize(
    "path", ["/v1/agents", "/v1/environments", "/v1/sessions", "/v1/sessions/@/events"]
)
@pytest.mark.parametrize(
    "moment", ["yesterday", "2024-13-01T00:00:00Z", "0001-01-01T00:00:00+01:00"]
)
def test_list_created_at_must_be_a_timestamp(
    client: anthropic.Anthropic, ids: Ids, path: str, moment: str
) -> None:
    refused(
        anthropic.BadRequestError,
        get(client, ids.fill(path), **{"created_at[gte]": moment}),
        "created_at[gte]",
    )


@pytest.mark.parametrize("path", ["/v1/agents", "/v1/environments", "/v1/sessions"])
def test_list_include_archived_must_be_boolean(
    client: anthropic.Anthropic, ids: Ids, path: str
) -> None:
    refused(
        anthropic.BadRequestError, get(client, path, include_archived="maybe"), "include_archived"
    )


def test_session_list_filters(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.list(statuses=["idle", "sleeping"]),  # type: ignore[list-item]
        "statuses",
        "sleeping",
    )
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.list(agent_version=1),
        "agent_version",
    )
    refused(
        anthropic.BadRequestError,
        get(client, "/v1/sessions", agent_id=ids.agent, agent_version="one"),
        "agent_version",
    )


def test_session_list_agent_version_past_64_bits(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(
        anthropic.BadRequestError,
        get(client, "/v1/sessions", agent_id=ids.agent, agent_version=str(2**63)),
        "agent_version",
    )


def test_event_list_types_must_be_known(client: anthropic.Anthropic, ids: Ids) -> None:
    refused(
        anthropic.BadRequestError,
        lambda: client.beta.sessions.events.list(
            ids.session, types=["agent.message", "agent.dream"]
        ),
        "types",
        "agent.dream",
    )  # type: ignore[list-item]


# ---- bodies that are not JSON objects, or hold what JSON cannot carry back -----------------------


@pytest.mark.parametrize(
    "path", ["/v1/agents", "/v1/environments", "/v1/sessions", "/v1/sessions/@/events"]
)
@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"[]", id="array"),
        pytest.param(b'"agent"', id="string"),
        pytest.param(b"42", id="number"),
        pytest.param(b"null", id="null"),
        pytest.param(b'{"name": ', id="truncated"),
        pytest.param(b"name=a", id="form-encoded"),
        pytest.param(b'{"name": "\xff\xfe"}', id="invalid-utf8"),
        pytest.param(b"\xef\xbb\xbf{}", id="utf8-bom"),
    ],
)
def test_bodies_that_are_not_json_objects(
    client: anthropic.Anthropic, ids: Ids, path: str, content: bytes
) -> None:
    refused(anthropic.BadRequestError, post(client, ids.fill(path), content=content))


@pytest.mark.parametrize("path", ["/v1/agents", "/v1/sessions/@/events"])
@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="nested-100000"),
        pytest.param(
            b'{"name": "a", "metadata": ' + b'{"a": ' * 2000 + b"1" + b"}" * 2001,
            id="nested-2000-in-a-field",
        ),
    ],
)
def test_deeply_nested_json_is_refused(
    client: anthropic.Anthropic, ids: Ids, path: str, content: bytes
) -> None:
    refused(anthropic.BadRequestError, post(client, ids.fill(path), content=content))


def test_body_over_the_size_limit_is_413(client: anthropic.Anthropic) -> None:
    body = b'{"name": "big", "model": "%s", "system": "' % MODEL.encode() + b"x" * (9 << 20) + b'"}'
    error = refused(anthropic.ContentTooLargeError, post(client, "/v1/agents", content=body))
    assert error.body["error"]["type"] == "request_too_large"  # type: ignore[index]


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_numbers_are_refused_not_stored(
    client: anthropic.Anthropic, value: bytes
) -> None:
    """Python's JSON reader takes NaN; a stored NaN can never be rendered again."""
    since = client.beta.agents.create(model=MODEL, name="clock").created_at
    body = b'{"name": "nan", "model": "%s", "multiagent": {"x": %s}}' % (MODEL.encode(), value)
    refused(anthropic.BadRequestError, post(client, "/v1/agents", content=body))
    assert [a.name for a in client.beta.agents.list(created_at_gte=since)] == ["clock"]


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        pytest.param(
            "/v1/agents",
            b'{"name": "s", "model": "%s", "metadata": {"k": "\\ud800"}}',
            "metadata",
            id="agent-metadata",
        ),
        pytest.param(
            "/v1/environments",
            b'{"name": "s", "metadata": {"k": "\\udfff"}}',
            "metadata",
            id="environment-metadata",
        ),
        pytest.param("/v1/sessions/@", b'{"title": "\\ud800"}', "title", id="session-title"),
        pytest.param(
            "/v1/sessions/@/events",
            b'{"events": [{"type": "user.message", "content": [{"type": "text", '
            b'"text": "\\udbff"}]}]}',
            "text",
            id="message-text",
        ),
    ],
)
def test_lone_surrogates_are_refused_not_stored(
    client: anthropic.Anthropic, ids: Ids, path: str, body: bytes, named: str
) -> None:
    """`"\\ud800"` is valid JSON text but no string UTF-8 can encode, so no response can hold
    it: storing it breaks every later read of the object and of any list that includes it."""
    session_id, _ = make_session(client)
    target = path.replace("@", session_id)
    content = body.replace(b"%s", MODEL.encode())
    refused(anthropic.BadRequestError, post(client, target, content=content), named)
    client.beta.sessions.retrieve(session_id)
    assert events(client, session_id) == []


@pytest.mark.parametrize(
    ("path", "body"),
    [
        pytest.param(
            "/v1/sessions",
            {"agent": {"type": "agent"}, "environment_id": "env_x"},
            id="agent-reference",
        ),
        pytest.param(
            "/v1/agents", {"name": "a", "model": MODEL, "metadata": {"k": 5}}, id="metadata-value"
        ),
    ],
)
def test_messages_speak_wire_not_validator_internals(
    client: anthropic.Anthropic, path: str, body: dict[str, Any]
) -> None:
    message = refused(anthropic.BadRequestError, post(client, path, body)).api_message or ""
    for internal in ("tagged-union", "constrained-str", "function-after", "AgentRef"):
        assert internal not in message, message
