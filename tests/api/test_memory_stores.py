"""Memory stores through the official SDK against a real server (SQLite and PostgreSQL):
stores, memories with paths and views, preconditions (409s that say not to retry), prefix
listing with roll-ups, versions with filters, redaction, archive and delete semantics."""

from __future__ import annotations

import base64
import hashlib

import anthropic
import pytest
from anthropic.types.beta.memory_stores import BetaManagedAgentsPreconditionParam

from tests.api.bad_input_support import get, post, refused
from tests.api.helpers import say, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.server import ServerProcess

BETA = ["agent-memory-2026-07-22"]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def client(server: ServerProcess) -> anthropic.Anthropic:
    return server.client(default_headers={"anthropic-beta": BETA[0]})


def test_store_lifecycle(client: anthropic.Anthropic) -> None:
    stores = client.beta.memory_stores
    store = stores.create(name="User Preferences", metadata={"team": "a"}, betas=BETA)
    assert store.id.startswith("memstore_") and store.type == "memory_store"
    assert store.description == "" and store.archived_at is None
    assert stores.retrieve(store.id) == store
    updated = stores.update(store.id, description="likes", metadata={"team": None, "x": "1"})
    assert updated.description == "likes" and updated.metadata == {"x": "1"}
    assert stores.update(store.id, description="").description == ""
    others = [stores.create(name=f"s{i}").id for i in range(3)]
    page = stores.list(limit=2)
    assert len(page.data) == 2 and page.next_page
    assert set(others) <= {s.id for s in stores.list(limit=2)}  # auto-paginates
    archived = stores.archive(store.id)
    assert archived.archived_at is not None
    assert store.id not in {s.id for s in stores.list(limit=100)}
    assert store.id in {s.id for s in stores.list(limit=100, include_archived=True)}
    with pytest.raises(anthropic.BadRequestError):
        stores.update(store.id, name="again")
    with pytest.raises(anthropic.BadRequestError):
        stores.memories.create(store.id, path="/a.md", content="x")
    deleted = stores.delete(store.id)
    assert deleted.id == store.id and deleted.type == "memory_store_deleted"
    with pytest.raises(anthropic.NotFoundError):
        stores.retrieve(store.id)


def test_memory_round_trip_and_preconditions(client: anthropic.Anthropic) -> None:
    stores = client.beta.memory_stores
    store = stores.create(name="notes")
    memories = stores.memories
    made = memories.create(store.id, path="/projects/foo/notes.md", content="héllo")
    assert made.content is None  # basic view by default on create
    assert made.content_sha256 == sha("héllo") and made.content_size_bytes == 6
    full = memories.retrieve(made.id, memory_store_id=store.id)
    assert full.content == "héllo" and full.memory_version_id == made.memory_version_id
    assert memories.retrieve(made.id, memory_store_id=store.id, view="basic").content is None

    stale: BetaManagedAgentsPreconditionParam = {
        "type": "content_sha256",
        "content_sha256": sha("other"),
    }
    with pytest.raises(anthropic.ConflictError) as caught:
        memories.update(made.id, memory_store_id=store.id, content="new", precondition=stale)
    err = caught.value
    assert err.status_code == 409 and err.response.headers["x-should-retry"] == "false"
    assert err.body["error"]["type"] == "memory_precondition_failed_error"  # type: ignore[index]
    assert memories.retrieve(made.id, memory_store_id=store.id).content == "héllo"

    fresh: BetaManagedAgentsPreconditionParam = {
        "type": "content_sha256",
        "content_sha256": made.content_sha256,
    }
    new = memories.update(
        made.id, memory_store_id=store.id, content="new", precondition=fresh, view="full"
    )
    assert new.content == "new" and new.memory_version_id != made.memory_version_id
    renamed = memories.update(made.id, memory_store_id=store.id, path="/archive/notes.md")
    assert renamed.id == made.id and renamed.path == "/archive/notes.md"

    other = memories.create(store.id, path="/b.md", content="")
    assert other.content_size_bytes == 0 and other.content_sha256 == sha("")
    with pytest.raises(anthropic.ConflictError) as taken:
        memories.create(store.id, path="/b.md", content="dup")
    assert taken.value.body["error"]["type"] == "memory_path_conflict_error"  # type: ignore[index]
    with pytest.raises(anthropic.ConflictError):
        memories.update(other.id, memory_store_id=store.id, path="/archive/notes.md")

    with pytest.raises(anthropic.ConflictError):
        memories.delete(other.id, memory_store_id=store.id, expected_content_sha256=sha("x"))
    gone = memories.delete(other.id, memory_store_id=store.id, expected_content_sha256=sha(""))
    assert gone.id == other.id and gone.type == "memory_deleted"
    with pytest.raises(anthropic.NotFoundError):
        memories.retrieve(other.id, memory_store_id=store.id)


@pytest.mark.parametrize(
    "path",
    [
        "no-slash.md",
        "/a//b.md",
        "/a/../b.md",
        "/./b.md",
        "/trailing/",
        "/ctl\x01.md",
        "/fmt\u200b.md",
        "/sep\u2028.md",
        "/e\u0301.md",  # not NFC
        "/" + "/".join(["s"] * 21),
        "/" + "x" * 1024,
    ],
)
def test_bad_paths_are_400(client: anthropic.Anthropic, path: str) -> None:
    store = client.beta.memory_stores.create(name="paths")
    with pytest.raises(anthropic.BadRequestError):
        client.beta.memory_stores.memories.create(store.id, path=path, content="x")


def test_size_limits_are_400(client: anthropic.Anthropic) -> None:
    stores = client.beta.memory_stores
    store = stores.create(name="sizes")
    edge = stores.memories.create(store.id, path="/edge.md", content="a" * 102_400)
    assert edge.content_size_bytes == 102_400
    with pytest.raises(anthropic.BadRequestError) as caught:
        stores.memories.create(store.id, path="/big.md", content="é" * 51_201)
    assert "102400" in caught.value.message
    with pytest.raises(anthropic.BadRequestError):
        stores.memories.update(edge.id, memory_store_id=store.id, content="a" * 102_401)
    with pytest.raises(anthropic.BadRequestError):
        stores.create(name="")
    with pytest.raises(anthropic.BadRequestError):
        stores.create(name="n", description="d" * 1025)
    with pytest.raises(anthropic.BadRequestError):
        stores.memories.list(store.id, path_prefix="/no-trailing-slash")


def test_prefix_listing_and_rollups(client: anthropic.Anthropic) -> None:
    stores = client.beta.memory_stores
    store = stores.create(name="tree")
    paths = [
        "/notes/a.md",
        "/notes/b.md",
        "/notes/deep/c.md",
        "/notes/deep/d.md",
        "/notes/deeper/x/y.md",
        "/notes-x/e.md",
        "/top.md",
    ]
    for path in paths:
        stores.memories.create(store.id, path=path, content=path)

    def listed(**kw: object) -> list[tuple[str, str]]:
        return [(i.type, i.path) for i in stores.memories.list(store.id, **kw)]  # type: ignore[arg-type]

    assert [p for _, p in listed()] == sorted(paths, key=lambda p: p.encode())
    assert [p for _, p in listed(path_prefix="/notes/")] == paths[:5]
    assert listed(path_prefix="/notes/", depth=1) == [
        ("memory", "/notes/a.md"),
        ("memory", "/notes/b.md"),
        ("memory_prefix", "/notes/deep/"),
        ("memory_prefix", "/notes/deeper/"),
    ]
    assert listed(depth=1) == [
        ("memory_prefix", "/notes-x/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/top.md"),
    ]
    # Pages of 1 walk the same items, prefixes counting toward the limit.
    first = stores.memories.list(store.id, path_prefix="/notes/", depth=1, limit=1)
    assert len(first.data) == 1 and first.next_page
    assert listed(path_prefix="/notes/", depth=1, limit=1) == listed(path_prefix="/notes/", depth=1)
    full = stores.memories.list(store.id, view="full", limit=100)
    assert len(full.data) == len(paths)
    assert all(m.content == m.path for m in full.data if m.type == "memory")
    with pytest.raises(anthropic.BadRequestError):
        stores.memories.list(store.id, page="not-a-cursor")


def test_versions_filters_and_redaction(client: anthropic.Anthropic) -> None:
    stores = client.beta.memory_stores
    store = stores.create(name="history")
    memory = stores.memories.create(store.id, path="/secret.md", content="token=abc")
    stores.memories.update(memory.id, memory_store_id=store.id, content="token=def")
    other = stores.memories.create(store.id, path="/other.md", content="o")
    stores.memories.delete(memory.id, memory_store_id=store.id)

    versions = stores.memory_versions
    every = list(versions.list(store.id))
    assert [v.operation for v in every] == ["deleted", "created", "modified", "created"]
    assert all(v.content is None for v in every)  # basic by default
    deleted = every[0]
    assert deleted.path == "/secret.md" and deleted.content_sha256 is None
    mine = list(versions.list(store.id, memory_id=memory.id, view="full"))
    assert [v.content for v in mine] == [None, "token=def", "token=abc"]
    assert [v.memory_id for v in versions.list(store.id, operation="created")] == [
        other.id,
        memory.id,
    ]
    actor = every[0].created_by
    assert actor is not None and actor.type == "api_actor"
    assert len(list(versions.list(store.id, api_key_id=actor.api_key_id))) == 4
    assert list(versions.list(store.id, session_id="sesn_nobody")) == []
    paged = versions.list(store.id, limit=1)
    assert len(paged.data) == 1 and paged.next_page
    assert [v.id for v in versions.list(store.id, limit=1)] == [v.id for v in every]

    first = mine[-1]
    assert versions.retrieve(first.id, memory_store_id=store.id).content == "token=abc"
    redacted = versions.redact(first.id, memory_store_id=store.id)
    assert redacted.redacted_at is not None and redacted.redacted_by is not None
    assert (redacted.content, redacted.path, redacted.content_sha256) == (None, None, None)
    assert redacted.created_by == first.created_by
    again = versions.retrieve(first.id, memory_store_id=store.id)
    assert again.content is None and again.redacted_at == redacted.redacted_at
    with pytest.raises(anthropic.NotFoundError):
        versions.retrieve("memver_missing", memory_store_id=store.id)

    # Archived: reads, deletes and redactions still work.
    stores.archive(store.id)
    assert stores.memories.retrieve(other.id, memory_store_id=store.id).content == "o"
    versions.redact(mine[1].id, memory_store_id=store.id)
    stores.memories.delete(other.id, memory_store_id=store.id)
    stores.delete(store.id)
    with pytest.raises(anthropic.NotFoundError):
        versions.list(store.id)


def test_session_resources_prompt_and_list_filter(
    client: anthropic.Anthropic, fake_model: FakeModelServer
) -> None:
    fake_model.reset(ScriptedTurns([Turn([Text("ok")])], repeat_last=True))
    stores = client.beta.memory_stores
    prefs = stores.create(name="User Preferences!", description="What the user likes")
    team = stores.create(name="team notes")
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="m", system="You help.")
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    session = client.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[
            {"type": "memory_store", "memory_store_id": prefs.id, "instructions": "Be brief."},
            {"type": "memory_store", "memory_store_id": team.id, "access": "read_only"},
        ],
    )
    first, second = session.resources
    assert first.type == "memory_store" and second.type == "memory_store"
    assert first.mount_path == "/mnt/memory/user-preferences" and first.access == "read_write"
    assert first.name == "User Preferences!" and first.description == "What the user likes"
    assert first.instructions == "Be brief."
    assert second.mount_path == "/mnt/memory/team-notes" and second.access == "read_only"
    stores.update(prefs.id, name="renamed")  # a snapshot: the session keeps the old name
    again = client.beta.sessions.retrieve(session.id).resources[0]
    assert again.type == "memory_store" and again.name == "User Preferences!"

    other = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    found = {s.id for s in client.beta.sessions.list(memory_store_id=team.id)}
    assert session.id in found and other.id not in found
    assert list(client.beta.sessions.list(memory_store_id="memstore_none")) == []

    say(client, session.id, "hi")
    wait_idle(client, session.id)
    system = fake_model.requests[-1]["system"]
    text = system if isinstance(system, str) else " ".join(b["text"] for b in system)
    assert "/mnt/memory/user-preferences (read_write): User Preferences!" in text
    assert "What the user likes" in text and "Instructions: Be brief." in text
    assert "/mnt/memory/team-notes (read_only): team notes" in text

    for bad in (
        {"type": "memory_store", "memory_store_id": "memstore_missing"},
        {"type": "memory_store", "memory_store_id": team.id, "access": "write_only"},
        {"type": "memory_store", "memory_store_id": team.id, "instructions": "x" * 4097},
    ):
        with pytest.raises(anthropic.BadRequestError):
            client.beta.sessions.create(
                agent=agent.id,
                environment_id=env.id,
                resources=[bad],  # type: ignore[list-item]
            )
    twice = {"type": "memory_store", "memory_store_id": team.id}
    with pytest.raises(anthropic.BadRequestError):
        client.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            resources=[twice, twice],  # type: ignore[list-item]
        )
    stores.archive(team.id)
    with pytest.raises(anthropic.BadRequestError) as archived:
        client.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            resources=[twice],  # type: ignore[list-item]
        )
    assert "archived" in archived.value.message


def test_bad_input_is_4xx_naming_the_field(client: anthropic.Anthropic) -> None:
    store = client.beta.memory_stores.create(name="bad")
    base = f"/v1/memory_stores/{store.id}"
    memory = client.beta.memory_stores.memories.create(store.id, path="/a.md", content="a")
    surrogate_page = base64.urlsafe_b64encode(b'{"a":"\\ud800","s":null}').decode()
    bad = anthropic.BadRequestError
    for call, fields in [
        (post(client, "/v1/memory_stores", {"name": "x", "extra": 1}), ["extra"]),
        (post(client, "/v1/memory_stores", {"name": 5}), ["name"]),
        (post(client, "/v1/memory_stores", {"name": "a\x07b"}), ["name"]),
        (post(client, base, {"metadata": {"k" * 65: "v"}}), ["metadata"]),
        (post(client, f"{base}/memories", {"path": "/b.md"}), ["content"]),
        (post(client, f"{base}/memories", {"path": "/b.md", "content": 3}), ["content"]),
        (
            post(client, f"{base}/memories/{memory.id}", {"precondition": {"type": "etag"}}),
            ["precondition"],
        ),
        (
            post(
                client,
                f"{base}/memories/{memory.id}",
                {"precondition": {"type": "content_sha256", "content_sha256": "ABC"}},
            ),
            ["content_sha256"],
        ),
        (get(client, f"{base}/memories", view="everything"), ["view"]),
        (get(client, f"{base}/memories", depth="-1"), ["depth"]),
        (get(client, f"{base}/memories", limit="0"), ["limit"]),
        (get(client, f"{base}/memories", limit="101"), ["limit"]),
        (get(client, f"{base}/memories", page=surrogate_page), ["page"]),
        (get(client, f"{base}/memories", path_prefix="//"), ["path_prefix"]),
        (get(client, f"{base}/memory_versions", operation="renamed"), ["operation"]),
        (get(client, f"{base}/memory_versions", page="mem_x"), ["page"]),
        (get(client, f"{base}/memory_versions", **{"created_at[gte]": "soon"}), ["created_at"]),
        (get(client, f"{base}/memory_versions", session_id="s", api_key_id="k"), ["session_id"]),
        (get(client, "/v1/memory_stores", page="junk"), ["page"]),
    ]:
        refused(bad, call, *fields)
    with pytest.raises(anthropic.BadRequestError):
        client.beta.memory_stores.memories.delete(
            memory.id, memory_store_id=store.id, expected_content_sha256="nothex"
        )
    with pytest.raises(anthropic.NotFoundError):
        client.beta.memory_stores.memories.retrieve("mem_nope", memory_store_id=store.id)
    with pytest.raises(anthropic.NotFoundError):
        client.beta.memory_stores.memories.list("memstore_nope")


def test_responses_have_exactly_the_sdk_fields(client: anthropic.Anthropic) -> None:
    stores = client.beta.memory_stores
    store = stores.create(name="shapes")
    memory = stores.memories.create(store.id, path="/dir/a.md", content="x", view="full")
    version = stores.memory_versions.retrieve(memory.memory_version_id, memory_store_id=store.id)
    prefix = stores.memories.list(store.id, depth=1).data[0]
    deleted = stores.memories.delete(memory.id, memory_store_id=store.id)
    gone = stores.delete(store.id)
    for item in (store, memory, version, prefix, deleted, gone):
        assert item.model_extra == {}, (type(item).__name__, item.model_extra)
        missing = set(type(item).model_fields) - set(item.model_fields_set)
        assert missing == set(), (type(item).__name__, missing)
    assert prefix.type == "memory_prefix" and prefix.path == "/dir/"
