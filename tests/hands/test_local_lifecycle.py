"""LocalHands lifecycle: death is detected at once, destroy/aclose kill everything, errors."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import anyio
import pytest

from corral.errors import HandsError
from corral.hands.base import Mount
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import make_recipe, needs_bwrap
from tests.uids import WORKER_UIDS

pytestmark = pytest.mark.anyio


def host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes mentioning `marker` (ps sees every PID namespace)."""
    out = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if marker in line]


async def _expect_death(sandbox: LocalSandbox, command: str) -> HandsError:
    with anyio.fail_after(30):  # far below the command's 120 s default timeout
        with pytest.raises(HandsError) as caught:
            await sandbox.execute("bash", {"command": command})
    return caught.value


@pytest.mark.bwrap
@needs_bwrap
@pytest.mark.parametrize("how", ["host kills init", "kill -9 -1 inside"])
async def test_death_is_reported_at_once_and_files_survive(
    local_hands: LocalHands, tmp_path: Path, how: str
) -> None:
    recipe = make_recipe(tmp_path)
    sandbox = await local_hands.provision(recipe)
    await sandbox.execute("write", {"file_path": "kept.txt", "content": "kept"})
    if how == "host kills init":
        async with anyio.create_task_group() as tg:
            tg.start_soon(_kill_later, sandbox.init_pid)
            error = await _expect_death(sandbox, "sleep 600")
    else:
        error = await _expect_death(sandbox, "kill -9 -1; sleep 600")
    assert (error.code, error.retryable) == ("sandbox_died", True)
    assert not sandbox.alive
    with pytest.raises(HandsError):
        await sandbox.execute("bash", {"command": "true"})
    fresh = await local_hands.provision(recipe)
    out = await fresh.execute("read", {"file_path": "kept.txt"})
    assert out.content[0]["text"] == "kept"


async def _kill_later(pid: int) -> None:
    await anyio.sleep(0.3)
    os.kill(pid, signal.SIGKILL)


@pytest.mark.bwrap
@needs_bwrap
async def test_destroy_kills_the_whole_tree(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    marker = f"corral-marker-{os.getpid()}"
    await sandbox.execute("write", {"file_path": f"{marker}.sh", "content": "sleep 1000\n"})
    command = f"setsid bash {marker}.sh & (bash {marker}.sh &) ; bash {marker}.sh &"
    assert not (await sandbox.execute("bash", {"command": command})).is_error
    with anyio.fail_after(10):
        while len(host_processes_with(marker)) < 3:
            await anyio.sleep(0.05)
    await sandbox.destroy()
    await sandbox.destroy()
    assert not sandbox.alive
    assert host_processes_with(marker) == []
    with pytest.raises(HandsError) as caught:
        await sandbox.execute("bash", {"command": "true"})
    assert caught.value.code == "sandbox_died"


@pytest.mark.bwrap
@needs_bwrap
async def test_aclose_destroys_every_sandbox(tmp_path: Path) -> None:
    hands = LocalHands(tmp_path / "state", uid_range=WORKER_UIDS)
    sandboxes = [await hands.provision(make_recipe(tmp_path, f"s{i}")) for i in range(3)]
    await hands.aclose()
    assert not any(s.alive for s in sandboxes)
    # only the sessions' host uids stay: they outlive a process, as the sessions do
    left = {p.name for p in (tmp_path / "state").iterdir()}
    assert left <= {"uids"}
    with pytest.raises(HandsError) as caught:
        await hands.provision(make_recipe(tmp_path))
    assert caught.value.code == "closed"


@pytest.mark.bwrap
@needs_bwrap
async def test_cancelled_call_kills_the_sandbox(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    with anyio.move_on_after(0.3):
        await sandbox.execute("bash", {"command": "sleep 600"})
    assert not sandbox.alive, "the pipe is out of step after a cancelled call"


@pytest.mark.bwrap
@needs_bwrap
async def test_concurrent_calls_are_serialised(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    results: list[str] = []

    async def call(i: int) -> None:
        out = await sandbox.execute("bash", {"command": f"sleep 0.05; echo {i}"})
        results.append(out.content[0]["text"])

    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(call, i)
    assert sorted(results) == ["0", "1", "2", "3", "4"]


async def test_missing_bwrap_names_the_debian_package(tmp_path: Path) -> None:
    hands = LocalHands(tmp_path / "state", uid_range=WORKER_UIDS, bwrap="/nonexistent/bwrap")
    with pytest.raises(HandsError) as caught:
        await hands.provision(make_recipe(tmp_path))
    assert caught.value.code == "bwrap_missing" and not caught.value.retryable
    assert "bubblewrap" in caught.value.message
    await hands.aclose()


@pytest.mark.bwrap
@needs_bwrap
@pytest.mark.parametrize(
    "bad",
    [
        {"mounts": (Mount(host_path=Path("/usr"), sandbox_path="/usr/x"),)},
        {"mounts": (Mount(host_path=Path("/nonexistent"), sandbox_path="/mnt/x"),)},
        {"mounts": (Mount(host_path=Path("/usr"), sandbox_path="relative"),)},
        {"env": {"A=B": "x"}},
    ],
)
async def test_invalid_recipes_are_refused(
    local_hands: LocalHands, tmp_path: Path, bad: dict[str, object]
) -> None:
    with pytest.raises(HandsError) as caught:
        await local_hands.provision(make_recipe(tmp_path, **bad))
    assert caught.value.code == "invalid_recipe" and not caught.value.retryable


@pytest.mark.bwrap
@needs_bwrap
async def test_cgroups_are_removed_with_the_sandbox(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    if not local_hands.enforcement.startswith("cgroup"):
        pytest.skip("no writable cgroups here")
    cgroup = sandbox._parts.cgroup
    assert cgroup is not None and all(d.exists() for d in cgroup.dirs)
    assert (cgroup.pids_dir / "pids.max").read_text().strip() == str(256 + 16)
    await sandbox.destroy()
    assert not any(d.exists() for d in cgroup.dirs)


@pytest.mark.bwrap
@needs_bwrap
async def test_works_without_cgroups(tmp_path: Path) -> None:
    hands = LocalHands(tmp_path / "state", uid_range=WORKER_UIDS, use_cgroups=False)
    try:
        sandbox = await hands.provision(make_recipe(tmp_path))
        assert hands.enforcement == "rlimit"
        out = await sandbox.execute("bash", {"command": "ulimit -v; echo ok"})
        assert out.content[0]["text"] == f"{1024 * 1024}\nok"
    finally:
        await hands.aclose()
