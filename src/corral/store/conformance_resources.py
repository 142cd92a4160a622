"""Conformance checks for resources, agent versions and session rows (see `conformance`).

Each check expects a fresh, open store; nothing backend-specific.
"""

from __future__ import annotations

import anyio

from corral.errors import Conflict, NotFound
from corral.ids import new_id
from corral.session.log import EventQuery
from corral.store.base import Page, Resource, SessionFilter, Store
from corral.store.conformance_support import (
    LONG_LEASE,
    Check,
    claimed,
    event,
    new_session,
    raises,
    seqs,
)


def day(n: int) -> str:
    """A creation timestamp on January `n`, 2025."""
    return f"2025-01-{n:02d}T00:00:00.000000Z"


def ids(items: list[Resource]) -> list[str]:
    """Ids of `items`, in order."""
    return [r.id for r in items]


async def check_resource_crud(store: Store) -> None:
    """Insert, get (by kind), replace, delete; duplicates and misses are errors or None."""
    env = Resource(kind="environment", id=new_id("env"), body={"name": "e"}, created_at=day(1))
    await store.insert_resource(env)
    await raises(Conflict, store.insert_resource(env))
    assert await store.get_resource("environment", env.id) == env
    assert await store.get_resource("agent", env.id) is None
    changed = Resource(
        kind="environment", id=env.id, body={"name": "f"}, created_at=day(1), archived_at=day(2)
    )
    await store.replace_resource(changed)
    assert await store.get_resource("environment", env.id) == changed
    missing = Resource(kind="environment", id=new_id("env"), body={}, created_at=day(1))
    await raises(NotFound, store.replace_resource(missing))
    assert await store.delete_resource("environment", env.id) is True
    assert await store.get_resource("environment", env.id) is None
    assert await store.delete_resource("environment", env.id) is False


async def check_resource_pages(store: Store) -> None:
    """Lists page by id both ways, return `limit + 1`, hide archived, filter by creation."""
    for n in range(1, 6):
        archived = day(9) if n == 3 else None
        env = Resource(
            kind="environment", id=f"env_{n:04d}", body={}, created_at=day(n), archived_at=archived
        )
        await store.insert_resource(env)
    await store.insert_resource(Resource(kind="file", id="file_0001", body={}, created_at=day(1)))

    async def page(**kw: object) -> list[str]:
        return ids(await store.list_resources("environment", Page(**kw)))  # type: ignore[arg-type]

    assert await page(limit=2) == ["env_0001", "env_0002", "env_0004"]
    assert await page(limit=2, after_id="env_0002") == ["env_0004", "env_0005"]
    assert await page(limit=2, order="desc") == ["env_0005", "env_0004", "env_0002"]
    assert await page(limit=5, order="desc", after_id="env_0004") == ["env_0002", "env_0001"]
    assert await page(include_archived=True) == [f"env_{n:04d}" for n in range(1, 6)]
    assert await page(created_gt=day(2)) == ["env_0004", "env_0005"]
    assert await page(created_gte=day(2)) == ["env_0002", "env_0004", "env_0005"]
    assert await page(created_lt=day(4)) == ["env_0001", "env_0002"]
    assert await page(created_lte=day(4), include_archived=True) == [
        "env_0001",
        "env_0002",
        "env_0003",
        "env_0004",
    ]
    assert ids(await store.list_resources("file", Page())) == ["file_0001"]


def _agent(agent_id: str, version: int, name: str = "a") -> Resource:
    body = {"id": agent_id, "version": version, "name": name, "updated_at": day(version)}
    return Resource(kind="agent", id=agent_id, body=body, created_at=day(1))


async def check_agent_versions(store: Store) -> None:
    """Versions append under optimistic locking; the latest is the agent; old ones stay."""
    aid = new_id("agent")
    await store.put_agent_version(_agent(aid, 1), None)
    await store.put_agent_version(_agent(aid, 2), 1)
    stale = await raises(Conflict, store.put_agent_version(_agent(aid, 3), 1))
    assert getattr(stale, "error_code", None) == "version_conflict"
    await raises(Conflict, store.put_agent_version(_agent(aid, 2, "again"), 2))
    latest = await store.get_resource("agent", aid)
    assert latest is not None and latest.body == _agent(aid, 2).body
    await store.put_agent_version(_agent(aid, 3), 2)
    pinned = await store.get_agent_version(aid, 1)
    assert pinned is not None and pinned.body == _agent(aid, 1).body
    assert pinned.created_at == day(1)
    assert await store.get_agent_version(aid, 9) is None

    async def versions(**kw: object) -> list[int]:
        rows = await store.list_agent_versions(aid, Page(**kw))  # type: ignore[arg-type]
        return [int(r.body["version"]) for r in rows]

    assert await versions(limit=2) == [1, 2, 3]
    assert await versions(after_id="1") == [2, 3]
    assert await versions(order="desc") == [3, 2, 1]
    assert await versions(order="desc", after_id="3", limit=1) == [2, 1]
    conflicts: list[BaseException] = []

    async def racer(name: str) -> None:
        try:
            await store.put_agent_version(_agent(aid, 4, name), 3)
        except Conflict as exc:
            conflicts.append(exc)

    async with anyio.create_task_group() as tg:
        for name in ("x", "y", "z"):
            tg.start_soon(racer, name)
    assert len(conflicts) == 2
    assert await versions(order="desc", limit=1) == [4, 3]
    assert await store.delete_resource("agent", aid) is True
    assert await store.get_agent_version(aid, 1) is None
    assert await store.list_agent_versions(aid, Page()) == []


async def check_session_create(store: Store) -> None:
    """A session is created with its initial events atomically, and woken by them."""
    quiet = await new_session(store, created_at=day(3))
    assert await store.claim("w1", LONG_LEASE) is None
    row = await store.get_session(quiet)
    assert row is not None and (row.created_at, row.agent_version) == (day(3), 1)
    assert row.body == {"title": None, "metadata": {}} and row.summary.status == "idle"
    assert (row.agent_id, row.environment_id, row.archived_at) == (
        "agent_conformance",
        "env_conformance",
        None,
    )
    sid = await new_session(store, [event(), event()])
    assert seqs(await store.read(sid, EventQuery())) == [1, 2]
    assert await store.last_seq(sid) == 2
    assert (await claimed(store)).session_id == sid
    await raises(Exception, new_session(store, session_id=sid))
    clash = event()
    await raises(Exception, new_session(store, [clash, clash]))
    assert await store.get_session(new_id("sesn")) is None


async def check_session_lists(store: Store) -> None:
    """`sessions.list` filters by agent, version, status, environment; pages both ways."""
    specs = [("a1", 1, "e1"), ("a1", 2, "e1"), ("a2", 1, "e2"), ("a1", 1, "e2")]
    for n, (agent, version, env) in enumerate(specs, start=1):
        await new_session(
            store,
            session_id=f"sesn_{n:04d}",
            agent_id=agent,
            agent_version=version,
            environment_id=env,
            created_at=day(n),
        )
    await store.append("sesn_0002", [event("session.status_running")])
    archived = await store.get_session("sesn_0004")
    assert archived is not None
    await store.update_session("sesn_0004", archived.body, archived_at=day(9))

    async def listed(page: Page | None = None, **where: object) -> list[str]:
        rows = await store.list_sessions(page or Page(), SessionFilter(**where))  # type: ignore[arg-type]
        return [r.id for r in rows]

    assert await listed() == ["sesn_0001", "sesn_0002", "sesn_0003"]
    assert await listed(Page(include_archived=True), agent_id="a1") == [
        "sesn_0001",
        "sesn_0002",
        "sesn_0004",
    ]
    assert await listed(agent_id="a1", agent_version=2) == ["sesn_0002"]
    assert await listed(statuses=["running"]) == ["sesn_0002"]
    assert await listed(statuses=["idle", "terminated"]) == ["sesn_0001", "sesn_0003"]
    assert await listed(Page(include_archived=True), environment_id="e2") == [
        "sesn_0003",
        "sesn_0004",
    ]
    assert await listed(Page(limit=1, order="desc")) == ["sesn_0003", "sesn_0002"]
    assert await listed(Page(order="desc", after_id="sesn_0003")) == ["sesn_0002", "sesn_0001"]
    assert await listed(Page(created_gte=day(2), created_lt=day(3))) == ["sesn_0002"]
    row = await store.get_session("sesn_0002")
    assert row is not None and row.summary.status == "running"


async def check_session_update(store: Store) -> None:
    """Body replacement stamps `updated_at`; archiving sticks; unknown ids are NotFound."""
    sid = await new_session(store)
    await store.update_session(sid, {"title": "t", "metadata": {"k": "v"}})
    row = await store.get_session(sid)
    assert row is not None and row.body == {"title": "t", "metadata": {"k": "v"}}
    assert row.updated_at is not None and row.archived_at is None
    await store.update_session(sid, row.body, archived_at=day(9))
    await store.update_session(sid, {"title": "u", "metadata": {}})
    row = await store.get_session(sid)
    assert row is not None and (row.archived_at, row.body["title"]) == (day(9), "u")
    await raises(NotFound, store.update_session(new_id("sesn"), {}))


RESOURCE_CHECKS: list[Check] = [
    check_resource_crud,
    check_resource_pages,
    check_agent_versions,
    check_session_create,
    check_session_lists,
    check_session_update,
]
