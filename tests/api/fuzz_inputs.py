"""Hypothesis strategies for malformed API input: bodies, query strings, path segments.

Pure data and strategies for tests/api/test_fuzz.py; it must not talk to a server.
Placeholders (`@AGENT@`, `@ENV@`, `@SESSION@`, `"@AGENT_VERSION@"`) stand for live ids.
"""

from __future__ import annotations

import base64
import copy
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, quote_from_bytes

from hypothesis import strategies as st

from tests.api.helpers import LOOKUP

MODEL = "claude-sonnet-4-5"
CLIENT_EVENT_TYPES = (
    "user.message",
    "user.interrupt",
    "user.tool_confirmation",
    "system.message",
    "user.custom_tool_result",
    "user.tool_result",
    "user.define_outcome",
    "session.updated",
)


# ---- JSON text, written by hand so NaN, lone surrogates and deep nesting get through ---------


@dataclass(frozen=True, slots=True)
class Deep:
    """A JSON value nested `depth` levels deep (built as text: Python cannot hold it)."""

    depth: int
    objects: bool


def dump(value: Any) -> str:
    """JSON text; NaN/Infinity allowed, lone surrogates escaped as `\\udXXX`."""
    if isinstance(value, Deep):
        opener, closer = ('{"a":', "}") if value.objects else ("[", "]")
        return opener * value.depth + "0" + closer * value.depth
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(dump(v) for v in value) + "]"
    return json.dumps(value)


HUGE = st.sampled_from(["", " ", "a" * 257, "b" * 2049, "c" * 100_001, "\x00", "😀" * 70])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.text(st.characters(categories=["Cs"]), min_size=1, max_size=2)
    | HUGE
)
JSON = st.recursive(
    SCALARS,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4)
    ),
    max_leaves=10,
)
SPECIAL = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, {"x": math.nan}, [math.inf]]),
    st.sampled_from(["\ud800", "a\udfffb", {"k": "\udc00"}, ["\udbff"]]),
    st.sampled_from([2**63, -(2**63) - 1, 10**30, 1e308, -0.0]),
    st.sampled_from(["", [], {}, {"": None}, "\x00"]),
)
"""Boundary values: non-finite floats, lone surrogates, integers past 64 bits, empties."""
NESTED = st.builds(Deep, st.sampled_from([64, 300, 800]), st.booleans())
"""Deep, but within what a JSON parser on a default Python stack can read."""
TOO_DEEP = st.builds(Deep, st.sampled_from([990, 2000, 100_000]), st.booleans())
RAW_BODIES = st.sampled_from(
    [
        b"",
        b"{",
        b"null",
        b"[]",
        b'"x"',
        b"1",
        b"\xef\xbb\xbf{}",
        b'{"a":1}{"b":2}',
        "{}".encode("utf-16"),
        b"\xff\xfe\xfd",
        b'{"name": "\xff"}',
        b"{'single': 'quotes'}",
        b"\x00" * 16,
    ]
)
MUTATIONS = (
    "replace",
    "replace",
    "replace",
    "delete",
    "extra",
    "extra",
    "wrap",
    "stringify",
    "null",
)


def locations(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key/index path inside a JSON value, the root included."""
    found = [here]
    if isinstance(value, dict):
        items: Any = value.items()
    else:
        items = enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found += locations(child, (*here, key))
    return found


def mutate(body: dict[str, Any], where: tuple[Any, ...], how: str, value: Any) -> Any:
    """`body` with the value at `where` perturbed one way."""
    if not where:
        return value
    body = copy.deepcopy(body)
    parent: Any = body
    for key in where[:-1]:
        parent = parent[key]
    key = where[-1]
    if how == "replace":
        parent[key] = value
    elif how == "delete":
        del parent[key]
    elif how == "extra" and isinstance(parent, dict):
        parent["unexpected_field"] = value
    elif how == "extra":
        parent.append(value)
    elif how == "wrap":
        parent[key] = [parent[key]]
    elif how == "stringify":
        parent[key] = dump(parent[key])
    else:
        parent[key] = None
    return body


def leaves(value: Any) -> list[tuple[Any, ...]]:
    """Paths to scalars, and to every object (where an extra key may go)."""
    found = []
    for where in locations(value):
        here: Any = value
        for key in where:
            here = here[key]
        if not isinstance(here, list):
            found.append(where)
    return found


def poison(body: dict[str, Any], where: tuple[Any, ...], value: Any) -> Any:
    """A scalar replaced by, or an object given an extra key with, a boundary value."""
    here: Any = body
    for key in where:
        here = here[key]
    return (
        mutate(body, (*where, "unexpected_field"), "replace", value)
        if isinstance(here, dict)
        else mutate(body, where, "replace", value)
    )


def bodies(valid: tuple[dict[str, Any], ...]) -> st.SearchStrategy[bytes]:
    """Mostly valid bodies with one field perturbed; some valid ones and random JSON values."""
    mutated = st.sampled_from(valid).flatmap(
        lambda body: st.builds(
            mutate,
            st.just(body),
            st.sampled_from(locations(body)),
            st.sampled_from(MUTATIONS),
            SPECIAL | JSON | NESTED,
        )
    )
    poisoned = st.sampled_from(valid).flatmap(
        lambda body: st.builds(poison, st.just(body), st.sampled_from(leaves(body)), SPECIAL)
    )
    return st.one_of(mutated, mutated, poisoned, poisoned, st.sampled_from(valid), JSON).map(
        lambda value: dump(value).encode()
    )


UNPARSEABLE = (
    TOO_DEEP.map(lambda deep: dump(deep).encode())
    | st.binary(max_size=64)
    | RAW_BODIES
    | JSON.filter(lambda v: not isinstance(v, dict)).map(lambda value: dump(value).encode())
)
"""Bodies that are not a JSON object at all."""


# ---- valid request bodies per write endpoint ---------------------------------------------------

TEXT = [{"type": "text", "text": "hi"}]
CITED = [{"type": "text", "text": "hi", "citations": [{"type": "char_location"}]}]
TOOLSET = {
    "type": "agent_toolset_20260401",
    "default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}},
    "configs": [{"name": "bash", "permission_policy": {"type": "always_ask"}}],
}
MCP = {"type": "mcp_toolset", "mcp_server_name": "docs", "configs": [{"name": "search"}]}
DOCS = [{"type": "url", "name": "docs", "url": "https://mcp.example.com"}]
BASIC = {"name": "fz", "model": MODEL}
LIMITED = {
    "type": "cloud",
    "networking": {
        "type": "limited",
        "allowed_hosts": ["a.example.com"],
        "allow_package_managers": True,
    },
    "packages": {"pip": ["requests==2.32"], "npm": ["left-pad"]},
}
AGENT_FIELDS = (
    {"metadata": {"k": "v"}, "system": "s", "description": "d"},
    {"tools": [LOOKUP]},
    {"model": {"id": MODEL, "effort": "low", "speed": "fast", "inference_geo": "us"}},
    {"tools": [TOOLSET]},
    {"tools": [MCP], "mcp_servers": DOCS},
    {"multiagent": None},
    {"execution_identity": {"type": "aws_role", "role_arn": "arn:aws:iam::1:role/x"}},
)
MESSAGE = {"type": "user.message", "content": CITED}


def events(*items: dict[str, Any]) -> dict[str, Any]:
    """An events.send body."""
    return {"events": list(items)}


@dataclass(frozen=True, slots=True)
class Write:
    """A write endpoint; `{id}` in `path` addresses an object of `kind`."""

    method: str
    path: str
    valid: tuple[dict[str, Any], ...] = ({},)
    kind: str | None = None
    creates: str | None = None
    ends: bool = False

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


WRITES = (
    Write("POST", "/v1/agents", (BASIC, *({**BASIC, **f} for f in AGENT_FIELDS)), creates="agents"),
    Write(
        "POST",
        "/v1/agents/{id}",
        (
            {"name": "renamed", "version": "@AGENT_VERSION@"},
            {"metadata": {"k": None, "n": "1"}},
            *AGENT_FIELDS,
            {"description": None, "system": "", "tools": [], "mcp_servers": []},
        ),
        kind="agent",
    ),
    Write("POST", "/v1/agents/{id}/archive", kind="agent", ends=True),
    Write(
        "POST",
        "/v1/environments",
        (
            {"name": "fz"},
            {"name": "sh", "config": {"type": "self_hosted"}},
            {"name": "fz", "config": LIMITED},
            {"name": "fz", "description": "d", "scope": "account", "metadata": {"k": "v"}},
        ),
        creates="environments",
    ),
    Write(
        "POST",
        "/v1/environments/{id}",
        (
            {"name": "n2"},
            {"description": "d", "metadata": {"k": "", "n": "1"}},
            {"config": {"type": "cloud", "networking": {"type": "unrestricted"}}},
            {"config": {"type": "cloud", "packages": {"pip": ["six"]}}},
        ),
        kind="environment",
    ),
    Write("DELETE", "/v1/environments/{id}", kind="environment", ends=True),
    Write(
        "POST",
        "/v1/sessions",
        (
            {"agent": "@AGENT@", "environment_id": "@ENV@"},
            {
                "agent": {"type": "agent", "id": "@AGENT@", "version": 1},
                "environment_id": "@ENV@",
                "title": "t",
                "metadata": {"k": "v"},
            },
            {
                "agent": {
                    "type": "agent_with_overrides",
                    "id": "@AGENT@",
                    "system": "o",
                    "model": MODEL,
                    "tools": [LOOKUP],
                },
                "environment_id": "@ENV@",
            },
            {"agent": "@AGENT@", "environment_id": "@ENV@", "initial_events": [MESSAGE]},
        ),
        creates="sessions",
    ),
    Write(
        "POST",
        "/v1/sessions/{id}",
        (
            {"title": "t2"},
            {"metadata": {"k": "v", "x": None}},
            {"agent": {"tools": [LOOKUP]}},
            {"agent": {"tools": [MCP], "mcp_servers": DOCS}},
        ),
        kind="session",
    ),
    Write(
        "POST",
        "/v1/sessions/{id}/events",
        (
            events(MESSAGE),
            events({"type": "user.interrupt"}),
            events({"type": "system.message", "content": CITED}),
            events(
                {
                    "type": "user.message",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "https://x.example/a.png"},
                        },
                        {
                            "type": "document",
                            "source": {"type": "text", "data": "doc"},
                            "title": "t",
                            "citations": {"enabled": True},
                        },
                    ],
                }
            ),
            events(
                {
                    "type": "user.custom_tool_result",
                    "custom_tool_use_id": "sevt_x",
                    "content": TEXT,
                    "is_error": False,
                }
            ),
            events(
                {
                    "type": "user.tool_confirmation",
                    "tool_use_id": "sevt_x",
                    "result": "deny",
                    "deny_message": "no",
                }
            ),
        ),
        kind="session",
    ),
    Write("POST", "/v1/sessions/{id}/archive", kind="session", ends=True),
    Write("DELETE", "/v1/sessions/{id}", kind="session", ends=True),
)
IDS = (
    st.sampled_from(["target", "target", "unknown", "other"])
    | st.sampled_from(["..", "%2F", "%00", "%ff", "x" * 5000])
    | st.text(min_size=1, max_size=30).map(lambda s: quote(s, safe=""))
)
"""Which id a write addresses: the live target, an unknown or wrong-kind id, or junk."""


# ---- query strings -----------------------------------------------------------------------------


def seq_cursor(seq: int) -> str:
    """An events page cursor in the server's format, for any integer."""
    return "page_" + base64.urlsafe_b64encode(f"seq:{seq}".encode()).decode().rstrip("=")


EDGES = ("9223372036854775807", "9223372036854775808", "-9223372036854775809", "9" * 30)
TZS = st.just(UTC) | st.integers(-1439, 1439).map(lambda m: timezone(timedelta(minutes=m)))
INTS = (
    st.integers().map(str)
    | st.text(max_size=12)
    | st.sampled_from(EDGES)
    | st.sampled_from(
        ["0", "-1", "1", "100", "101", "1000", "1001", "1e3", "0x10", " 5", "١٢", "9" * 5000, ""]
    )
)
TIMES = (
    st.datetimes(timezones=TZS).map(datetime.isoformat)
    | st.text(max_size=30)
    | st.sampled_from(
        [
            "2024-01-01",
            "2024-13-01T00:00:00Z",
            "1700000000",
            "now",
            "2024-01-01T00:00:00+24:00",
            "0001-01-01T00:00:00Z",
            "0001-01-01T00:00:00+01:00",
            "9999-12-31T23:59:59-01:00",
        ]
    )
)
CURSORS = (
    st.integers().map(seq_cursor)
    | st.sampled_from(EDGES).map(int).map(seq_cursor)
    | st.integers().map(str)
    | st.sampled_from(EDGES)
    | st.text(max_size=30)
    | st.binary(max_size=20).map(lambda b: "page_" + base64.urlsafe_b64encode(b).decode())
    | st.sampled_from(["page_", "page_!!", "²", "agent_zzz", "sesn_zzz"])
)
BOOLS = st.sampled_from(["true", "false", "True", "1", "0", "yes", ""]) | st.text(max_size=5)
ORDERS = st.sampled_from(["asc", "desc", "ASC", "", "random"]) | st.text(max_size=5)
STATUSES = st.lists(
    st.sampled_from(["idle", "running", "rescheduling", "terminated"]) | st.text(max_size=12),
    max_size=3,
)
TYPES = st.lists(
    st.sampled_from((*CLIENT_EVENT_TYPES, "agent.message", "session.deleted"))
    | st.text(max_size=20),
    max_size=3,
)
PARAMS: dict[str, st.SearchStrategy[Any]] = {
    "limit": INTS,
    "page": CURSORS,
    "include_archived": BOOLS,
    "order": ORDERS,
    "version": INTS,
    "agent_version": INTS,
    "agent_id": st.sampled_from(["@AGENT@", "agent_zzz", ""]),
    "memory_store_id": st.text(max_size=8),
    "statuses[]": STATUSES,
    "statuses": STATUSES,
    "types[]": TYPES,
    "types": TYPES,
    "bogus": st.text(max_size=8),
    **{f"created_at[{op}]": TIMES for op in ("gt", "gte", "lt", "lte")},
}
_RANGE = ("created_at[gt]", "created_at[gte]", "created_at[lt]", "created_at[lte]")
READS: dict[str, tuple[str, ...]] = {
    "/v1/agents": ("limit", "page", "include_archived", "order", *_RANGE),
    "/v1/agents/@AGENT@": ("version",),
    "/v1/agents/@AGENT@/versions": ("limit", "page"),
    "/v1/environments": ("limit", "page", "include_archived", *_RANGE),
    "/v1/environments/@ENV@": (),
    "/v1/sessions": (
        "limit",
        "page",
        "include_archived",
        "order",
        "statuses[]",
        "statuses",
        "agent_id",
        "agent_version",
        "memory_store_id",
        *_RANGE,
    ),
    "/v1/sessions/@SESSION@": (),
    "/v1/sessions/@SESSION@/events": ("limit", "page", "order", "types[]", "types", *_RANGE),
}
RAW_QUERIES = st.binary(max_size=30).map(quote_from_bytes) | st.sampled_from(
    [
        "limit=%ff",
        "limit",
        "=",
        "&&",
        "page=%00",
        "version=%ff",
        "created_at%5Bgte%5D=%ff%fe",
        "types%5B%5D=%ff",
    ]
)


def queries(names: tuple[str, ...]) -> st.SearchStrategy[list[tuple[str, str]] | str]:
    """Pairs of typed-looking or garbage values for `names` (and an unknown one), or raw text."""
    typed = st.fixed_dictionaries({}, optional={n: PARAMS[n] for n in (*names, "bogus")})
    pairs = typed.map(
        lambda params: [
            (k, item) for k, v in params.items() for item in (v if isinstance(v, list) else [v])
        ]
    )
    return pairs | pairs | RAW_QUERIES


# ---- paths and credentials ---------------------------------------------------------------------

SEGMENTS = st.sampled_from(
    [
        "agents",
        "environments",
        "sessions",
        "events",
        "archive",
        "versions",
        "stream",
        "work",
        "threads",
        "resources",
        "..",
        ".",
        "%2e%2e",
        "%00",
        "%ff",
        "agent_zzz",
        "sesn_zzz",
        "env_zzz",
    ]
) | st.text(min_size=1, max_size=20).map(lambda s: quote(s, safe=""))
METHODS = st.sampled_from(["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"])
