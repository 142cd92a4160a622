"""Resource limits of LocalHands sandboxes: each hit is a clear tool error, never a host problem."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from corral.hands.base import Limits
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import make_recipe, needs_bwrap

pytestmark = [pytest.mark.bwrap, needs_bwrap, pytest.mark.anyio]


async def bash(sandbox: LocalSandbox, command: str, timeout_ms: int = 0) -> tuple[str, bool]:
    tool_input: dict[str, object] = {"command": command}
    if timeout_ms:
        tool_input["timeout_ms"] = timeout_ms
    out = await sandbox.execute("bash", tool_input)
    return out.content[0]["text"], out.is_error


async def test_fork_bomb_is_contained(local_hands: LocalHands, tmp_path: Path) -> None:
    bomb = await local_hands.provision(
        make_recipe(tmp_path, "bomb", limits=Limits(max_processes=50))
    )
    if not local_hands.enforcement.startswith("cgroup"):
        pytest.skip("no writable pids cgroup: a root-mapped sandbox cannot contain a fork bomb")
    bystander = await local_hands.provision(make_recipe(tmp_path, "bystander"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(_bomb, bomb)
        for _ in range(5):  # another sandbox and the host keep working meanwhile
            text, err = await bash(bystander, "sh -c 'echo ok'")
            assert (text, err) == ("ok", False)
            assert (await anyio.run_process(["true"])).returncode == 0
            await anyio.sleep(0.1)
    text, err = await bash(bomb, "ps -e --no-headers | wc -l")
    assert not err and int(text) < 10


async def _bomb(sandbox: LocalSandbox) -> None:
    text, err = await bash(sandbox, ":(){ :|:& };:; sleep 1")
    # reported by the in-sandbox agent ("… reached") or, when it did not see the table full,
    # by the host from the cgroup's fork failures ("… hit the process limit …"): both kill it
    assert err and "process limit of 50" in text


async def test_a_backgrounded_fork_bomb_is_reported_by_the_next_call(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path, limits=Limits(max_processes=50)))
    if not local_hands.enforcement.startswith("cgroup"):
        pytest.skip("no writable pids cgroup: a root-mapped sandbox cannot contain a fork bomb")
    first, _ = await bash(sandbox, ":(){ :|:& };:")
    await anyio.sleep(0.5)
    second, err = await bash(sandbox, "echo next")
    assert "process limit" in first + second
    text, err = await bash(sandbox, "ps -e --no-headers | wc -l")
    assert not err and int(text) < 10


async def test_memory_hog_fails_cleanly(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path, limits=Limits(memory_bytes=2**28)))
    text, err = await bash(sandbox, "python3 -c \"a = ' ' * 10**10\"")
    assert err and "MemoryError" in text and "256 MiB" in text
    text, err = await bash(sandbox, "echo fine")
    assert (text, err) == ("fine", False)


async def test_total_memory_is_limited_by_the_cgroup(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path, limits=Limits(memory_bytes=2**27)))
    if not local_hands.enforcement.startswith("cgroup"):
        pytest.skip("without a memory cgroup only per-process limits apply")
    hog = "python3 -c 'import time; b = bytearray(100 * 2**20); time.sleep(30)'"
    text, err = await bash(sandbox, f"for i in 1 2 3 4; do {hog} & done; wait", timeout_ms=20_000)
    assert err and "ran out of memory (limit 128 MiB)" in text
    text, err = await bash(sandbox, "echo fine")
    assert (text, err) == ("fine", False)


async def test_endless_output_is_truncated(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path, limits=Limits(output_bytes=4096)))
    text, err = await bash(sandbox, "yes", timeout_ms=1000)
    assert err and "timed out after 1s" in text
    assert "[output truncated:" in text and len(text) < 4096 + 300
    text, err = await bash(sandbox, "yes | head -c 50000000 ; echo done")
    assert not err and text.startswith("y\ny\n") and text.endswith("y\ndone")
    assert "[output truncated: 49995" in text


async def test_timeout_kills_the_command_and_keeps_the_shell(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    await bash(sandbox, "sleep 1000 &")
    await bash(sandbox, "cd /tmp && export KEEP=1")
    cmd = "(sleep 1001 &); setsid sleep 1002 & sleep infinity"
    text, err = await bash(sandbox, cmd, timeout_ms=300)
    assert err and "timed out after 0.3s and was killed" in text and "restarted" not in text
    text, _ = await bash(sandbox, "pwd; echo $KEEP; ps -eo args= | grep '^sleep' | sort")
    # (bash may first report the killed background job of the previous command)
    assert text.splitlines()[-3:] == ["/tmp", "1", "sleep 1000"], "earlier jobs stay"


async def test_timeout_of_a_shell_builtin_restarts_the_shell(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    text, err = await bash(sandbox, "cd /tmp; while :; do :; done", timeout_ms=300)
    assert err and "timed out" in text and "the shell was restarted" in text
    text, err = await bash(sandbox, "pwd")
    assert (text, err) == ("/workspace", False)


async def test_wall_limit_caps_timeout_ms(local_hands: LocalHands, tmp_path: Path) -> None:
    limits = Limits(wall_seconds=0.5)
    sandbox = await local_hands.provision(make_recipe(tmp_path, limits=limits))
    text, err = await bash(sandbox, "sleep 60", timeout_ms=600_000)
    assert err and "timed out after 0.5s" in text


async def test_cpu_limit(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path, limits=Limits(cpu_seconds=1)))
    text, err = await bash(sandbox, "python3 -c 'while True: pass'")
    assert err and "CPU time limit of 1s exceeded" in text
    text, err = await bash(sandbox, "echo fine")
    assert (text, err) == ("fine", False)


@pytest.mark.slow
async def test_catastrophic_grep_regex_is_stopped(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    await sandbox.execute("write", {"file_path": "a.txt", "content": "a" * 40 + "!\n"})
    out = await sandbox.execute("grep", {"pattern": "^(a+)+$"})
    assert out.is_error and out.content[0]["text"] == "grep: timed out after 30s"
    out = await sandbox.execute("grep", {"pattern": "a!"})
    assert out.content[0]["text"] == f"/workspace/a.txt:1:{'a' * 40}!"
