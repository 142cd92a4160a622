"""The outputs collector on a real SQLite store and blob store, with the sandbox's moves made by
a thread: a racing directory/symlink swap, subdirectories, floods, quotas, deleted sessions."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.files.blobs import LocalBlobStore
from corral.files.outputs import OutputCollector, OutputLimits
from corral.files.service import FileService
from corral.store.conformance_support import new_session
from corral.store.sqlite import SqliteStore
from tests.files.test_beneath import CANARY, exchange

pytestmark = pytest.mark.anyio


@dataclass(frozen=True, slots=True)
class Env:
    files: FileService
    session_id: str
    outputs: Path

    async def contents(self) -> dict[str, bytes]:
        found = {}
        for name, body in (await self.files.session_outputs(self.session_id)).items():
            found[name] = self.files.blobs.path(body["sha256"]).read_bytes()
        return found


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    store = SqliteStore(tmp_path / "corral.db")
    await store.open()
    try:
        files = FileService(store, LocalBlobStore(tmp_path / "blobs"), max_bytes=1024 * 1024)
        outputs = tmp_path / "outputs"
        outputs.mkdir()
        yield Env(files, await new_session(store), outputs)
    finally:
        await store.aclose()


async def test_racing_swap_never_collects_host_files(env: Env, tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret.txt").write_bytes(CANARY)
    (env.outputs / "sub").mkdir()
    (env.outputs / "sub" / "real.txt").write_bytes(b"harmless")
    (env.outputs / "link").symlink_to(host)
    collector = OutputCollector(env.files)
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            exchange(env.outputs / "sub", env.outputs / "link")

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            assert await collector.collect(env.session_id, env.outputs) == []
    finally:
        stop.set()
        thread.join()
    found = await env.contents()
    assert found and set(found.values()) == {b"harmless"}, found


async def test_subdirectories_are_stored_once_under_their_path(env: Env) -> None:
    (env.outputs / "reports").mkdir()
    (env.outputs / "reports" / "summary.md").write_bytes(b"one")
    (env.outputs / "summary.md").write_bytes(b"top")
    collector = OutputCollector(env.files)
    for _ in range(3):
        await collector.collect(env.session_id, env.outputs)
    assert await env.contents() == {"reports/summary.md": b"one", "summary.md": b"top"}
    (env.outputs / "reports" / "summary.md").write_bytes(b"two")
    await OutputCollector(env.files).collect(env.session_id, env.outputs)  # a cold cache too
    assert await env.contents() == {"reports/summary.md": b"two", "summary.md": b"top"}


async def test_file_cap_holds_inside_one_directory(env: Env) -> None:
    (env.outputs / "many").mkdir()
    for i in range(30):
        (env.outputs / "many" / f"f{i:02}").write_bytes(b"x")
    collector = OutputCollector(env.files, OutputLimits(max_files=10))
    notes = await collector.collect(env.session_id, env.outputs)
    assert len(notes) == 1 and "10" in notes[0]
    assert len(await env.contents()) == 10
    assert await collector.collect(env.session_id, env.outputs) == [], "said once"
    assert len(await env.contents()) == 10


async def test_quotas_refuse_by_size_and_free_up(env: Env) -> None:
    with (env.outputs / "sparse.bin").open("wb") as handle:
        handle.truncate(10 * 1024 * 1024 * 1024)  # 10 GiB of holes: refused unread
    (env.outputs / "a.bin").write_bytes(bytes(300))
    (env.outputs / "b.bin").write_bytes(bytes(300))
    limits = OutputLimits(max_bytes_per_call=10_000, max_bytes_per_session=500)
    collector = OutputCollector(env.files, limits)
    notes = await collector.collect(env.session_id, env.outputs)
    assert [n.split(" (")[0] for n in notes] == [
        "/mnt/session/outputs/b.bin",
        "/mnt/session/outputs/sparse.bin",
    ]
    assert all("over the session's outputs quota of 500 bytes" in n for n in notes)
    assert await env.contents() == {"a.bin": bytes(300)}
    (env.outputs / "a.bin").write_bytes(b"small")
    assert await collector.collect(env.session_id, env.outputs) == []
    assert await env.contents() == {"a.bin": b"small", "b.bin": bytes(300)}


async def test_deleted_sessions_files_go_and_do_not_come_back(env: Env) -> None:
    (env.outputs / "report.md").write_bytes(b"r")
    collector = OutputCollector(env.files)
    await collector.collect(env.session_id, env.outputs)
    (body,) = (await env.files.session_outputs(env.session_id)).values()
    assert await env.files.store.delete_session(env.session_id)
    assert await env.files.delete_session_files(env.session_id) == 1
    assert not env.files.blobs.path(body["sha256"]).exists()
    assert await collector.collect(env.session_id, env.outputs) == []
    assert await env.contents() == {}
