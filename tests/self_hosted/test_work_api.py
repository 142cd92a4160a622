"""The /work/* endpoints as the SDK calls them, and every boundary of the worker credentials."""

from __future__ import annotations

import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import pytest

from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.self_hosted.conftest import WORK_TTL
from tests.self_hosted.support import TOOLSET, cli, create_key, self_hosted_env
from tests.server import ServerProcess


@pytest.fixture(autouse=True)
def _model(fake_model: FakeModelServer) -> None:
    fake_model.reset(ScriptedTurns([Turn([Text("ok")])], repeat_last=True))


def as_bearer(server: ServerProcess, token: str) -> anthropic.Anthropic:
    """The SDK authenticated with a worker credential, as the SDK's worker builds it."""
    return anthropic.Anthropic(base_url=server.url, api_key=None, auth_token=token, max_retries=0)


def new_session(client: anthropic.Anthropic, env_id: str) -> str:
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="w",
        tools=[TOOLSET],  # type: ignore[list-item]
    )
    return client.beta.sessions.create(agent=agent.id, environment_id=env_id).id


def sessions_token(work: Any) -> str:
    secret = work.secret
    payload = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
    token = payload["sessions_token"]
    assert isinstance(token, str)
    return token


def poll_until(worker: anthropic.Anthropic, env_id: str, **kw: Any) -> Any:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        item = worker.beta.environments.work.poll(env_id, block_ms=999, **kw)
        if item is not None:
            return item
    raise AssertionError("nothing to poll")


def test_poll_ack_heartbeat_stop_as_the_sdk_calls_them(server: ServerProcess) -> None:
    admin = server.client()
    env_id = self_hosted_env(admin)
    key = create_key(server, env_id)
    worker = as_bearer(server, key)
    work = worker.beta.environments.work
    raw = httpx.get(
        f"{server.url}/v1/environments/{env_id}/work/poll",
        headers={"authorization": f"Bearer {key}"},
    )
    assert raw.status_code == 200 and raw.text == "null"
    assert raw.headers["content-type"].startswith("application/json")
    assert work.poll(env_id, block_ms=20) is None
    for bad in (0, 1000):
        with pytest.raises(anthropic.BadRequestError):
            work.poll(env_id, block_ms=bad)

    session_id = new_session(admin, env_id)
    item = poll_until(worker, env_id, anthropic_worker_id="host-abc123")
    assert (item.type, item.state, item.data.type, item.data.id) == (
        "work",
        "queued",
        "session",
        session_id,
    )
    stats = work.stats(env_id)
    assert (stats.depth, stats.pending, stats.workers_polling) == (0, 1, 1)
    token = sessions_token(item)
    assert admin.beta.environments.work.retrieve(item.id, environment_id=env_id).secret is None

    acked = work.ack(item.id, environment_id=env_id)
    assert acked.state == "starting" and acked.acknowledged_at
    lease = as_bearer(server, token).beta.environments.work
    beat = lease.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    assert (beat.type, beat.state, beat.lease_extended, beat.ttl_seconds) == (
        "work_heartbeat",
        "active",
        True,
        WORK_TTL,
    )
    again = lease.heartbeat(
        item.id, environment_id=env_id, expected_last_heartbeat=beat.last_heartbeat
    )
    assert again.lease_extended and again.last_heartbeat != beat.last_heartbeat
    with pytest.raises(anthropic.APIStatusError) as stale:
        lease.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat=beat.last_heartbeat)
    assert stale.value.status_code == 412
    details = stale.value.body["error"]["details"]  # type: ignore[index]
    assert details["error_code"] == "heartbeat_precondition_failed"
    assert details["current_state"] == {
        "last_heartbeat": again.last_heartbeat,
        "lease_extended": False,
        "state": "active",
        "ttl_seconds": WORK_TTL,
    }

    updated = admin.beta.environments.work.update(
        item.id, environment_id=env_id, metadata={"rack": "b7"}
    )
    assert updated.metadata == {"rack": "b7"}
    assert [w.id for w in work.list(env_id)] == [item.id]

    stopping = admin.beta.environments.work.stop(item.id, environment_id=env_id)
    assert stopping.state == "stopping" and stopping.stop_requested_at
    told = lease.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat="whatever")
    assert told.state == "stopping"
    stopped = lease.stop(item.id, environment_id=env_id, force=True)
    assert stopped.state == "stopped" and stopped.stopped_at
    refused = httpx.post(
        f"{server.url}/v1/environments/{env_id}/work/{item.id}/stop",
        headers={"authorization": f"Bearer {key}"},
        json={"force": True},
    )
    assert refused.status_code == 409 and refused.headers["x-should-retry"] == "false"


def test_a_worker_back_after_its_lease_expired_is_refused(server: ServerProcess) -> None:
    """What a SIGSTOPped worker meets when it comes back: 412, and its token is dead."""
    admin = server.client()
    env_id = self_hosted_env(admin)
    worker = as_bearer(server, create_key(server, env_id))
    session_id = new_session(admin, env_id)
    item = poll_until(worker, env_id)
    worker.beta.environments.work.ack(item.id, environment_id=env_id)
    lease = as_bearer(server, sessions_token(item))
    beat = lease.beta.environments.work.heartbeat(
        item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
    )
    time.sleep(WORK_TTL + 2.5)  # the lease (3 s) plus a check interval (1 s), and slack
    with pytest.raises(anthropic.APIStatusError) as late:
        worker.beta.environments.work.heartbeat(
            item.id, environment_id=env_id, expected_last_heartbeat=beat.last_heartbeat
        )
    assert late.value.status_code == 412
    assert late.value.body["error"]["details"]["current_state"]["state"] == "stopped"  # type: ignore[index]
    with pytest.raises(anthropic.APIStatusError) as by_token:  # as the SDK's worker beats
        lease.beta.environments.work.heartbeat(
            item.id, environment_id=env_id, expected_last_heartbeat=beat.last_heartbeat
        )
    assert by_token.value.status_code == 412
    with pytest.raises(anthropic.AuthenticationError):
        lease.beta.environments.work.stop(item.id, environment_id=env_id, force=True)
    with pytest.raises(anthropic.AuthenticationError):
        lease.beta.sessions.retrieve(session_id)


def test_credential_boundaries(server: ServerProcess) -> None:
    admin = server.client()
    env_a, env_b = self_hosted_env(admin), self_hosted_env(admin)
    key_a, key_b = create_key(server, env_a), create_key(server, env_b)
    worker_a = as_bearer(server, key_a)
    session_a, session_b = new_session(admin, env_a), new_session(admin, env_b)

    # An environment key: its own environment's work and sessions, nothing else.
    with pytest.raises(anthropic.PermissionDeniedError):
        worker_a.beta.environments.work.poll(env_b)
    with pytest.raises(anthropic.PermissionDeniedError):
        worker_a.beta.sessions.retrieve(session_b)
    assert worker_a.beta.sessions.retrieve(session_a).id == session_a
    with pytest.raises(anthropic.PermissionDeniedError):
        worker_a.beta.agents.list()
    with pytest.raises(anthropic.PermissionDeniedError):
        worker_a.beta.environments.create(name="x", config={"type": "cloud"})
    memory = httpx.get(
        f"{server.url}/v1/memory_stores", headers={"authorization": f"Bearer {key_a}"}
    )
    assert memory.status_code == 403 and "environment keys" in memory.text

    # A sessions token: its own session and lease only, while the item lives.
    item_a = poll_until(worker_a, env_a)
    item_b = poll_until(as_bearer(server, key_b), env_b)
    token_a = sessions_token(item_a)
    scoped = as_bearer(server, token_a)
    assert scoped.beta.sessions.retrieve(session_a).id == session_a
    assert list(scoped.beta.sessions.events.list(session_a)) is not None
    with pytest.raises(anthropic.PermissionDeniedError):
        scoped.beta.sessions.retrieve(session_b)
    with pytest.raises(anthropic.PermissionDeniedError):
        scoped.beta.environments.work.heartbeat(item_b.id, environment_id=env_b)
    with pytest.raises(anthropic.PermissionDeniedError):
        scoped.beta.environments.work.poll(env_a)
    with pytest.raises(anthropic.PermissionDeniedError):
        scoped.beta.sessions.delete(session_a)
    worker_a.beta.environments.work.stop(item_a.id, environment_id=env_a, force=True)
    with pytest.raises(anthropic.AuthenticationError):
        scoped.beta.sessions.retrieve(session_a)

    # A forged or revoked key is unknown.
    with pytest.raises(anthropic.AuthenticationError):
        as_bearer(server, key_a[:-4] + "AAAA").beta.environments.work.poll(env_a)
    listed = cli(server, "env-key", "list", env_a)
    assert listed.returncode == 0 and key_a not in listed.stdout
    key_id = key_a.split(".")[1]
    assert key_id in listed.stdout
    assert cli(server, "env-key", "revoke", key_id).returncode == 0
    with pytest.raises(anthropic.AuthenticationError):
        worker_a.beta.environments.work.poll(env_a)
    assert cli(server, "env-key", "revoke", key_id).returncode == 1


def test_a_session_whose_worker_left_is_queued_again_on_new_input(server: ServerProcess) -> None:
    admin = server.client()
    env_id = self_hosted_env(admin)
    worker = as_bearer(server, create_key(server, env_id))
    work = worker.beta.environments.work
    session_id = new_session(admin, env_id)
    first = poll_until(worker, env_id)
    work.ack(first.id, environment_id=env_id)
    work.stop(first.id, environment_id=env_id, force=True)  # the worker left
    assert work.poll(env_id) is None
    admin.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    )
    again = poll_until(worker, env_id)
    assert again.data.id == session_id and again.id != first.id
    # While that item is live, more input queues nothing more.
    admin.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": "?"}]}]
    )
    assert work.poll(env_id) is None
    assert sorted(w.id for w in work.list(env_id)) == sorted([first.id, again.id])


def test_two_workers_polling_one_environment_never_get_one_item(server: ServerProcess) -> None:
    """100 races of two pollers for one queued item, then of two acks for it."""
    admin = server.client()
    env_id = self_hosted_env(admin)
    key = create_key(server, env_id)
    workers = [as_bearer(server, key), as_bearer(server, key)]
    agent = admin.beta.agents.create(
        model="claude-sonnet-4-5",
        name="race",
        tools=[TOOLSET],  # type: ignore[list-item]
    )

    def poll(worker: anthropic.Anthropic, start: threading.Barrier) -> Any:
        start.wait()
        return worker.beta.environments.work.poll(env_id, reclaim_older_than_ms=0)

    def ack(worker: anthropic.Anthropic, work_id: str, start: threading.Barrier) -> int:
        start.wait()
        try:
            worker.beta.environments.work.ack(work_id, environment_id=env_id)
        except anthropic.ConflictError:
            return 409
        return 200

    with ThreadPoolExecutor(2) as pool:
        for trial in range(100):
            session = admin.beta.sessions.create(agent=agent.id, environment_id=env_id)
            start = threading.Barrier(2)
            got = list(pool.map(poll, workers, [start, start]))
            held = [g for g in got if g is not None]
            assert held and all(g.data.id == session.id for g in held), f"trial {trial}: {got}"
            start = threading.Barrier(2)
            acks = list(pool.map(ack, workers, [held[0].id] * 2, [start, start]))
            assert sorted(acks) == [200, 409], f"trial {trial}: {acks}"
            workers[0].beta.environments.work.stop(held[0].id, environment_id=env_id, force=True)


def test_memory_needs_a_sessions_token_of_a_session_that_mounts_the_store(
    server: ServerProcess,
) -> None:
    admin = server.client()
    env_id = self_hosted_env(admin)
    key = create_key(server, env_id)
    worker = as_bearer(server, key)
    mounted = admin.beta.memory_stores.create(name="mounted")
    other = admin.beta.memory_stores.create(name="other")
    agent = admin.beta.agents.create(model="claude-sonnet-4-5", name="m")
    admin.beta.sessions.create(
        agent=agent.id,
        environment_id=env_id,
        resources=[{"type": "memory_store", "memory_store_id": mounted.id}],
    )
    item = poll_until(worker, env_id)
    scoped = as_bearer(server, sessions_token(item))
    scoped.beta.memory_stores.memories.create(mounted.id, path="/a.md", content="ok")
    assert [m.path for m in scoped.beta.memory_stores.memories.list(mounted.id)] == ["/a.md"]  # type: ignore[union-attr]
    with pytest.raises(anthropic.PermissionDeniedError):
        scoped.beta.memory_stores.memories.list(other.id)
    with pytest.raises(anthropic.PermissionDeniedError):
        scoped.beta.memory_stores.list()
    with pytest.raises(anthropic.PermissionDeniedError):
        worker.beta.memory_stores.memories.list(mounted.id)  # the environment key
    worker.beta.environments.work.stop(item.id, environment_id=env_id, force=True)
    with pytest.raises(anthropic.AuthenticationError):  # the item stopped: the token died
        scoped.beta.memory_stores.memories.list(mounted.id)


def test_files_and_repositories_are_refused_on_self_hosted_hands(server: ServerProcess) -> None:
    # Their blobs and tokens stay on the server, so a worker could never mount them: refused
    # when asked for, not accepted and then missing from the sandbox.
    admin = server.client()
    env_id = self_hosted_env(admin)
    agent = admin.beta.agents.create(model="claude-sonnet-4-5", name="w", tools=[TOOLSET])  # type: ignore[list-item]
    uploaded = admin.beta.files.upload(file=("notes.txt", b"hello", "text/plain"))
    repo = {
        "type": "github_repository",
        "url": "https://git.example.com/team/repo.git",
        "authorization_token": "t0ken",
    }
    for resource in ({"type": "file", "file_id": uploaded.id}, repo):
        with pytest.raises(anthropic.BadRequestError) as refused:
            admin.beta.sessions.create(
                agent=agent.id,
                environment_id=env_id,
                resources=[resource],  # type: ignore[list-item]
            )
        assert "not available on self_hosted environments" in refused.value.message
        assert "resources[0]" in refused.value.message
    session_id = admin.beta.sessions.create(agent=agent.id, environment_id=env_id).id
    with pytest.raises(anthropic.BadRequestError) as refused:
        admin.beta.sessions.resources.add(session_id, type="file", file_id=uploaded.id)
    assert "not available on self_hosted environments" in refused.value.message
