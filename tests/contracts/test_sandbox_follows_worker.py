"""The documented scale-out deployment: `corral serve --workers 0` (API only) plus a separate
`corral worker` on PostgreSQL. Sandboxes live in the worker, so changes made through the API
(resources, archive, delete) must reach the worker's sandbox without the API touching it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.api.test_sandbox_follows_session import (
    check_resources_follow,
    eventually,
    live_sandboxes,
    run_bash,
    sandbox_running,
    toolset_session,
)
from tests.fakes.messages_server import FakeModelServer
from tests.server import DATABASE_URL_ENV, ServerProcess, fresh_postgres, start_worker, stop_worker

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def api(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer
) -> Iterator[ServerProcess]:
    """An API-only server and one worker process on a fresh database and a shared data dir."""
    if not os.environ.get(DATABASE_URL_ENV):
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    data_dir = tmp_path_factory.mktemp("cluster")
    with fresh_postgres("corral_follow") as url:
        server = ServerProcess(
            data_dir, model_url=fake_model.url, args=("--database-url", url, "--workers", "0")
        ).start()
        worker = start_worker(data_dir, url, fake_model.url)
        try:
            yield server
        finally:
            stop_worker(worker)
            server.stop()


def test_resource_changes_reach_the_workers_sandbox(
    api: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = api.client()
    session_id = toolset_session(client)
    check_resources_follow(client, fake_model, session_id)
    assert live_sandboxes(api) == [], "an API-only process holds no sandbox"


def test_archive_reaches_the_workers_sandbox(
    api: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = api.client()
    session_id = toolset_session(client)
    assert (
        run_bash(client, fake_model, session_id, "echo kept > /workspace/kept; echo ok").strip()
        == "ok"
    )
    workspace = api.data_dir / "sessions" / session_id / "workspace"
    stat = workspace.stat()
    assert sandbox_running(stat), "the worker's sandbox is live"
    client.beta.sessions.archive(session_id)
    eventually(lambda: not sandbox_running(stat), "archive left the worker's sandbox")
    assert (workspace / "kept").read_text() == "kept\n"


def test_delete_reaches_the_workers_sandbox_and_directory(
    api: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = api.client()
    session_id = toolset_session(client)
    assert (
        run_bash(client, fake_model, session_id, "echo x > /workspace/f; echo ok").strip() == "ok"
    )
    session_dir = api.data_dir / "sessions" / session_id
    workspace = session_dir / "workspace"
    stat = workspace.stat()
    assert sandbox_running(stat)
    client.beta.sessions.delete(session_id)
    eventually(lambda: not session_dir.exists(), "the deleted session's directory stayed")
    eventually(lambda: not sandbox_running(stat), "delete left the worker's sandbox")
