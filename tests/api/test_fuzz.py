"""Property-based fuzzing of every write endpoint and every list/read query parameter.

Malformed input must get a 4xx error envelope, never a 5xx; a refused request must change
nothing; an accepted one must read back. Sentinel objects made first are never addressed by the
fuzz and must be intact after it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.fuzz_inputs import (
    CLIENT_EVENT_TYPES,
    IDS,
    JSON,
    METHODS,
    MODEL,
    READS,
    SEGMENTS,
    TEXT,
    UNPARSEABLE,
    WRITES,
    Write,
    bodies,
    dump,
    queries,
)
from tests.api.helpers import LOOKUP, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.server import API_KEY, ServerProcess


def fuzz(examples: int) -> settings:
    """Bounded runs (the whole module stays well under 90 s on 2 cores); no example database,
    so nothing is written into the repo; hypothesis prints the seed and a reproduce blob."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,
        ],
    )


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
}
SESSION_STABLE = (
    "agent",
    "environment_id",
    "title",
    "metadata",
    "archived_at",
    "resources",
    "vault_ids",
)
OTHER_KIND = {"agent": "session", "environment": "agent", "session": "environment"}
PREFIX = {"agent": "agent_", "environment": "env_", "session": "sesn_"}
GOOD_AUTH: tuple[dict[str, str], ...] = (
    {"x-api-key": API_KEY},
    {"authorization": f"Bearer {API_KEY}"},
)
BAD_AUTH: tuple[dict[str, str], ...] = (
    {"x-api-key": "wrong"},
    {"authorization": "Bearer"},
    {"x-api-key": ""},
    {"authorization": API_KEY},
    {},
)


class Api:
    """Raw HTTP with the API key; a fresh connection after a 5xx (the server drops it)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = self._client()

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"x-api-key": API_KEY}, timeout=30)

    def send(
        self, method: str, path: str, *, content: bytes | None = None, params: Any = None
    ) -> httpx.Response:
        """One request; a transport failure is reported as a possible crash."""
        headers = {"content-type": "application/json"} if content is not None else None
        try:
            resp = self.http.request(method, path, content=content, params=params, headers=headers)
        except httpx.TransportError as exc:
            self.http.close()
            self.http = self._client()
            raise AssertionError(f"{method} {path}: connection failed: {exc!r}") from exc
        if resp.status_code >= 500:
            self.http.close()
            self.http = self._client()
        return resp

    def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        """A request that must succeed; its JSON."""
        content = None if body is None else json.dumps(body).encode()
        resp = self.send(method, path, content=content, **kw)
        assert resp.status_code == 200, f"{method} {path}: {resp.status_code} {resp.text[:300]}"
        return resp.json()


class World:
    """Targets the fuzz addresses (made again once archived or deleted) and sentinels it never
    addresses, with their snapshots."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.ids: dict[str, str] = {}
        self.sentinels = self._make_sentinels()
        self.snapshots: dict[str, Any] = {}

    def target(self, kind: str) -> str:
        """The live target of `kind`, made if missing."""
        if kind not in self.ids:
            if kind == "agent":
                made = self.api.ok(
                    "POST", "/v1/agents", {"name": "target", "model": MODEL, "tools": [LOOKUP]}
                )
            elif kind == "environment":
                made = self.api.ok("POST", "/v1/environments", {"name": "target"})
            else:
                made = self.api.ok(
                    "POST",
                    "/v1/sessions",
                    {"agent": self.target("agent"), "environment_id": self.target("environment")},
                )
            self.ids[kind] = made["id"]
        return self.ids[kind]

    def forget(self, kind: str) -> None:
        """The target was archived or deleted: make a new one when next needed."""
        self.ids.pop(kind, None)

    def fill(self, text: str) -> str:
        """Put the live targets' ids (and the agent's current version) into a template."""
        for token, kind in (
            ("@AGENT@", "agent"),
            ("@ENV@", "environment"),
            ("@SESSION@", "session"),
        ):
            if token in text:
                text = text.replace(token, self.target(kind))
        if '"@AGENT_VERSION@"' in text:
            version = self.api.ok("GET", f"/v1/agents/{self.target('agent')}")["version"]
            text = text.replace('"@AGENT_VERSION@"', str(version))
        return text

    def _make_sentinels(self) -> dict[str, str]:
        agent = self.api.ok(
            "POST",
            "/v1/agents",
            {
                "name": "sentinel",
                "model": MODEL,
                "system": "v1",
                "tools": [LOOKUP],
                "metadata": {"keep": "me"},
            },
        )
        self.api.ok("POST", f"/v1/agents/{agent['id']}", {"version": 1, "system": "v2"})
        env = self.api.ok(
            "POST",
            "/v1/environments",
            {
                "name": "sentinel",
                "metadata": {"keep": "me"},
                "config": {
                    "type": "cloud",
                    "networking": {"type": "limited", "allowed_hosts": ["api.example.com"]},
                },
            },
        )
        session = self.api.ok(
            "POST",
            "/v1/sessions",
            {
                "agent": agent["id"],
                "environment_id": env["id"],
                "title": "sentinel",
                "metadata": {"keep": "me"},
            },
        )
        self.api.ok(
            "POST",
            f"/v1/sessions/{session['id']}/events",
            {"events": [{"type": "user.message", "content": TEXT}]},
        )
        return {"agent": agent["id"], "environment": env["id"], "session": session["id"]}

    def read_sentinels(self) -> dict[str, Any]:
        """Everything stored about the sentinels."""
        agent, env, session = (self.sentinels[k] for k in ("agent", "environment", "session"))
        body = self.api.ok("GET", f"/v1/sessions/{session}")
        return {
            "agent": self.api.ok("GET", f"/v1/agents/{agent}"),
            "agent_v1": self.api.ok("GET", f"/v1/agents/{agent}", params={"version": 1}),
            "versions": self.api.ok("GET", f"/v1/agents/{agent}/versions"),
            "environment": self.api.ok("GET", f"/v1/environments/{env}"),
            "session": {k: body[k] for k in SESSION_STABLE},
            "events": self.api.ok("GET", f"/v1/sessions/{session}/events", params={"limit": 1000}),
        }

    def observe(self, kind: str) -> Any:
        """What a refused request must not change about the target of `kind`."""
        target = self.target(kind)
        if kind != "session":
            return self.api.ok("GET", f"/v1/{kind}s/{target}")
        body = self.api.ok("GET", f"/v1/sessions/{target}")
        sent = self.api.ok(
            "GET",
            f"/v1/sessions/{target}/events",
            params={"types[]": CLIENT_EVENT_TYPES, "limit": 1000},
        )
        return {**{k: body[k] for k in SESSION_STABLE}, "client_events": sent["data"]}


@pytest.fixture(scope="module")
def world(server: ServerProcess, fake_model: FakeModelServer) -> Iterator[World]:
    """Targets and sentinels on the module's server; the model always answers "hello"."""
    fake_model.reset(ScriptedTurns([Turn([Text("hello")])], repeat_last=True))
    made = World(Api(server.url))
    wait_idle(server.client(), made.sentinels["session"], stop="end_turn")
    made.snapshots = made.read_sentinels()
    yield made
    made.api.http.close()


def check_error(resp: httpx.Response, context: str) -> None:
    """Below 500, and an error is the wire envelope with a non-empty message."""
    assert resp.status_code < 500, f"{context} -> {resp.status_code} {resp.text[:300]}"
    # A redirect is no error: the SDK follows it, re-sending the body to another endpoint.
    assert not 300 <= resp.status_code < 400, (
        f"{context} -> {resp.status_code} redirect to {resp.headers.get('location')}"
    )
    if resp.status_code < 400 or resp.request.method == "HEAD":
        return
    try:
        body = resp.json()
    except ValueError as exc:
        raise AssertionError(f"{context} -> {resp.status_code} non-JSON error") from exc
    assert isinstance(body, dict) and body.get("type") == "error", f"{context} -> {body}"
    error = body.get("error")
    assert isinstance(error, dict), f"{context} -> {body}"
    assert isinstance(error.get("message"), str) and error["message"].strip(), f"{context}: {body}"
    assert isinstance(body.get("request_id"), str) and body["request_id"], f"{context}: {body}"
    assert isinstance(error.get("details", {}), dict), f"{context} -> {body}"
    expected = ERROR_TYPES.get(resp.status_code)
    assert expected in (None, error.get("type")), f"{context} -> {resp.status_code} {body}"


def address(world: World, write: Write, choice: str) -> str:
    """The request path for `write` with the chosen id."""
    if write.kind is None:
        return write.path
    ident = {
        "target": lambda: world.target(str(write.kind)),
        "unknown": lambda: PREFIX[str(write.kind)] + "0" * 26,
        "other": lambda: world.target(OTHER_KIND[str(write.kind)]),
    }
    return write.path.replace("{id}", ident.get(choice, lambda: choice)())


def exercise(world: World, write: Write, choice: str, content: bytes) -> None:
    """Send one fuzzed write and check the invariants; a failure may have spoilt the targets,
    so the next example (hypothesis replays while shrinking) gets new ones."""
    try:
        _exercise(world, write, choice, content)
    except AssertionError:
        world.ids.clear()
        raise


def _exercise(world: World, write: Write, choice: str, content: bytes) -> None:
    addressed = write.kind if choice == "target" else None
    path = address(world, write, choice)
    content = world.fill(content.decode("utf-8", "surrogateescape")).encode(
        "utf-8", "surrogateescape"
    )
    before = world.observe(addressed) if addressed else None
    since = datetime.now(UTC).isoformat()
    resp = world.api.send(write.method, path, content=content)
    context = f"{write.method} {path} {content[:300]!r}"
    check_error(resp, context)
    if resp.status_code >= 400:
        if addressed:
            assert world.observe(addressed) == before, f"refused but changed: {context}"
        if write.creates:
            made = world.api.ok(
                "GET",
                f"/v1/{write.creates}",
                params={"created_at[gte]": since, "include_archived": "true"},
            )
            assert made["data"] == [], f"refused but created: {context}"
    elif addressed and write.ends:
        world.forget(addressed)
    elif addressed:
        world.observe(addressed)
    elif write.creates:
        made_id = resp.json()["id"]
        world.api.ok("GET", f"/v1/{write.creates}/{made_id}")
        if write.creates == "sessions":
            world.api.ok("GET", f"/v1/sessions/{made_id}/events")


@pytest.fixture(autouse=True)
def fresh_targets(world: World) -> None:
    """Each test starts on targets no earlier test can have spoilt."""
    world.ids.clear()


@pytest.mark.parametrize("write", WRITES, ids=str)
def test_the_valid_examples_are_accepted(world: World, write: Write) -> None:
    for body in write.valid:
        content = world.fill(dump(body))
        if "sevt_x" not in content:  # those name tool uses no session has
            resp = world.api.send(
                write.method, address(world, write, "target"), content=content.encode()
            )
            assert resp.status_code == 200, f"{write} {content}: {resp.text[:300]}"
        if write.ends:
            world.forget(str(write.kind))


# Reads first: a write bug can leave an object no list can render, which would fail them.


@pytest.mark.parametrize("template", sorted(READS))
@fuzz(100)
@given(data=st.data())
def test_fuzz_list_and_read_queries(world: World, template: str, data: st.DataObject) -> None:
    query = data.draw(queries(READS[template]), label="query")
    path = world.fill(template)
    if isinstance(query, str):
        resp = world.api.send("GET", f"{path}?{query}")
    else:
        resp = world.api.send("GET", path, params=[(k, world.fill(v)) for k, v in query])
    check_error(resp, f"GET {resp.request.url}")
    if resp.status_code == 200 and "@" not in template.split("/")[-1]:
        page = resp.json()
        assert isinstance(page["data"], list), page
        assert page["next_page"] is None or isinstance(page["next_page"], str), page


@fuzz(150)
@given(
    method=METHODS,
    segments=st.lists(SEGMENTS, max_size=5),
    auth=st.sampled_from(GOOD_AUTH + BAD_AUTH),
    content=st.none() | st.binary(max_size=32) | JSON.map(lambda v: dump(v).encode()),
)
def test_fuzz_paths_methods_and_keys(
    server: ServerProcess,
    world: World,
    method: str,
    segments: list[str],
    auth: dict[str, str],
    content: bytes | None,
) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as bare:
        resp = bare.request(method, "/v1/" + "/".join(segments), content=content, headers=auth)
    context = f"{method} {resp.request.url} {auth} {content!r:.200}"
    check_error(resp, context)
    if auth in BAD_AUTH and resp.request.url.path.startswith("/v1"):  # httpx drops "/v1/.."
        assert resp.status_code == 401, f"{context} -> {resp.status_code}"


@pytest.mark.parametrize("write", WRITES, ids=str)
@fuzz(200)
@given(choice=IDS, data=st.data())
def test_fuzz_write_bodies(world: World, write: Write, choice: str, data: st.DataObject) -> None:
    exercise(world, write, choice, data.draw(bodies(write.valid), label="body"))


@fuzz(150)
@given(write=st.sampled_from(WRITES), choice=IDS, content=UNPARSEABLE)
def test_fuzz_bodies_that_are_not_json_objects(
    world: World, write: Write, choice: str, content: bytes
) -> None:
    exercise(world, write, choice, content)


def test_after_the_fuzz_the_server_is_healthy_and_sentinels_are_intact(
    server: ServerProcess, world: World
) -> None:
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert world.read_sentinels() == world.snapshots
    client = server.client()
    agent = client.beta.agents.create(model=MODEL, name="after")
    env = client.beta.environments.create(name="after")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    client.beta.sessions.events.send(
        session.id,
        events=[{"type": "user.message", "content": [{"type": "text", "text": "still there?"}]}],
    )
    wait_idle(client, session.id, stop="end_turn")
