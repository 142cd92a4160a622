"""Disk quota on /workspace + outputs: over it, a clear tool error; `rm` in bash gets out of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.hands._usage import measure, over_quota
from corral.hands.base import Limits, ToolOutput
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import make_recipe, needs_bwrap

pytestmark = [pytest.mark.anyio]
MiB = 2**20


def text_of(out: ToolOutput) -> str:
    return "".join(str(b.get("text", "")) for b in out.content)


async def bash(sandbox: LocalSandbox, command: str) -> tuple[str, bool]:
    out = await sandbox.execute("bash", {"command": command})
    return text_of(out), out.is_error


async def quota_sandbox(hands: LocalHands, tmp_path: Path, quota: int) -> LocalSandbox:
    return await hands.provision(make_recipe(tmp_path, limits=Limits(disk_bytes=quota)))


@pytest.mark.bwrap
@needs_bwrap
async def test_a_sparse_file_larger_than_the_quota_cannot_be_made(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await quota_sandbox(local_hands, tmp_path, 100 * MiB)
    for target in ("/workspace/sparse", "/mnt/session/outputs/sparse"):
        text, err = await bash(sandbox, f"truncate -s 600M {target}")
        assert err and "no file may exceed the disk quota of 100.0 MiB" in text, text
        text, err = await bash(
            sandbox, f"python3 -c \"open('{target}', 'ab').truncate(600 << 20)\""
        )
        assert err and "File too large" in text, text
    assert await bash(sandbox, "rm -f /workspace/sparse /mnt/session/outputs/sparse; echo ok") == (
        "ok",
        False,
    )


@pytest.mark.bwrap
@needs_bwrap
async def test_sparse_files_count_at_their_apparent_size(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await quota_sandbox(local_hands, tmp_path, 100 * MiB)
    text, err = await bash(sandbox, "truncate -s 60M a; truncate -s 60M /mnt/session/outputs/b")
    assert err and "disk quota exceeded: /workspace and outputs use 120.0 MiB of 100.0 MiB" in text
    assert await bash(sandbox, "rm a; echo ok") == ("ok", False)


@pytest.mark.bwrap
@needs_bwrap
async def test_over_quota_write_is_refused_until_files_are_deleted(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await quota_sandbox(local_hands, tmp_path, 32 * MiB)
    text, err = await bash(sandbox, "for i in 1 2 3; do head -c 16M /dev/urandom > f$i; done; ls")
    assert err and text.startswith("f1\nf2\nf3\n[disk quota exceeded: /workspace and outputs use 4")
    assert text.endswith(" of 32.0 MiB; delete files to continue]")
    for tool, tool_input in [
        ("write", {"file_path": "new.txt", "content": "x"}),
        ("edit", {"file_path": "f1", "old_string": "a", "new_string": "b"}),
    ]:
        out = await sandbox.execute(tool, tool_input)
        assert out.is_error and text_of(out).startswith(f"{tool}: disk quota exceeded: ")
    assert not (tmp_path / "s1" / "workspace" / "new.txt").exists()
    out = await sandbox.execute("glob", {"pattern": "f*"})  # reading still works
    assert not out.is_error and text_of(out).count("/workspace/f") == 3
    text, err = await bash(sandbox, "du -sh . >/dev/null && rm f1 f2 && echo freed")
    assert (text, err) == ("freed", False)
    out = await sandbox.execute("write", {"file_path": "new.txt", "content": "x"})
    assert (text_of(out), out.is_error) == ("wrote 1 bytes to new.txt", False)


@pytest.mark.bwrap
@needs_bwrap
async def test_the_write_tool_cannot_make_a_file_over_the_quota(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await quota_sandbox(local_hands, tmp_path, MiB)
    out = await sandbox.execute("write", {"file_path": "big.txt", "content": "x" * (2 * MiB)})
    assert out.is_error and "file too large" in text_of(out)
    assert await bash(sandbox, "rm -f big.txt; echo ok") == ("ok", False)


@pytest.mark.bwrap
@needs_bwrap
async def test_a_new_sandbox_on_a_full_workspace_refuses_the_first_write(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    workspace = tmp_path / "s1" / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "left-by-an-earlier-sandbox").write_bytes(b"x" * 2 * MiB)
    sandbox = await quota_sandbox(local_hands, tmp_path, MiB)
    out = await sandbox.execute("write", {"file_path": "new.txt", "content": "x"})
    assert out.is_error and "disk quota exceeded" in text_of(out)
    assert not (workspace / "new.txt").exists()
    assert await bash(sandbox, "rm left-by-an-earlier-sandbox; echo ok") == ("ok", False)
    out = await sandbox.execute("write", {"file_path": "new.txt", "content": "x"})
    assert not out.is_error


def test_usage_counts_directories_and_never_follows_symlinks(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "d" / "e").mkdir(parents=True)
    outside.mkdir()
    (outside / "big").write_bytes(b"x" * MiB)
    (ws / "d" / "link").symlink_to(outside)
    (ws / "d" / "e" / "small").write_bytes(b"y" * 1000)
    os.link(ws / "d" / "e" / "small", ws / "hardlink")
    usage = measure([ws, tmp_path / "missing"])
    dirs = sum(os.lstat(p).st_blocks * 512 for p in (ws, ws / "d", ws / "d" / "e"))
    small = max(os.lstat(ws / "hardlink").st_blocks * 512, 1000)
    link = os.lstat(ws / "d" / "link").st_blocks * 512
    assert (usage.bytes, usage.entries, usage.cut_short) == (dirs + small + link, 5, "")
    assert over_quota(usage, usage.bytes) is None
    assert over_quota(usage, usage.bytes - 1) is not None


def test_a_huge_tree_stops_the_walk_and_counts_as_over_quota(tmp_path: Path) -> None:
    for i in range(150):
        (tmp_path / f"f{i}").touch()
    usage = measure([tmp_path], max_entries=100)
    assert usage.entries == 101 and usage.cut_short
    note = over_quota(usage, 2**40)
    assert note == (
        "disk quota exceeded: /workspace and outputs hold more than 100 files and directories; "
        "delete files to continue"
    )
    deep = tmp_path / "deep"
    deep.mkdir()
    path = deep
    for _ in range(10):
        path = path / "d"
        path.mkdir()
    assert measure([deep], max_depth=20).cut_short == ""
    assert "nest deeper than 5 levels" in (measure([deep], max_depth=5).cut_short)
