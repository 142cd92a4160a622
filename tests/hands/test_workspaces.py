"""Session directories: removal never runs under a live sandbox's hold (in this process or
another one) and never follows links planted in the tree."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from corral.hands.workspaces import LOCK_NAME, DirBusy, SessionDirs

pytestmark = pytest.mark.anyio

SID = "sesn_01testworkspaces"


async def test_a_hold_blocks_removal_until_released(tmp_path: Path) -> None:
    dirs = SessionDirs(tmp_path)
    hold = await dirs.hold(SID)
    (dirs.path(SID) / "workspace").mkdir()
    async with dirs.exclusive(SID) as free:
        assert not free
    hold.release()
    hold.release()  # idempotent
    async with dirs.exclusive(SID) as free:
        assert free
        assert await dirs.remove(SID)
    assert not dirs.path(SID).exists()


async def test_a_hold_in_another_process_blocks_removal(tmp_path: Path) -> None:
    dirs = SessionDirs(tmp_path)
    dirs.path(SID).mkdir()
    code = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT);"
        "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()"
    )
    lock = str(dirs.path(SID) / LOCK_NAME)
    child = await anyio.open_process([sys.executable, "-c", code, lock])
    async with child:
        assert child.stdin is not None and child.stdout is not None
        lines = BufferedByteReceiveStream(child.stdout)
        with anyio.fail_after(30):
            assert await lines.receive_until(b"\n", 100) == b"held"
        async with dirs.exclusive(SID) as free:
            assert not free
        await child.stdin.aclose()
        await child.wait()
    async with dirs.exclusive(SID) as free:
        assert free


async def test_removal_holds_off_new_sandboxes_and_absent_dirs_are_free(tmp_path: Path) -> None:
    dirs = SessionDirs(tmp_path)
    async with dirs.exclusive(SID) as free:
        assert free and await dirs.remove(SID)
    dirs.path(SID).mkdir()
    async with dirs.exclusive(SID) as free:
        assert free
        with pytest.raises(DirBusy):
            await dirs.hold(SID)


async def test_remove_unlinks_planted_links_without_following_them(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    (outside / "precious").write_text("keep")
    (outside / "inner" / "also").write_text("keep")
    dirs = SessionDirs(tmp_path / "sessions")
    workspace = dirs.path(SID) / "workspace"
    (workspace / "deep").mkdir(parents=True)
    os.symlink(outside, workspace / "dir_link")
    os.symlink(outside / "precious", workspace / "deep" / "file_link")
    os.symlink(outside / "inner", dirs.path(SID) / "outputs")
    async with dirs.exclusive(SID) as free:
        assert free and await dirs.remove(SID)
    assert not dirs.path(SID).exists()
    assert (outside / "precious").read_text() == "keep"
    assert (outside / "inner" / "also").read_text() == "keep"


def test_ids_cannot_name_other_paths(tmp_path: Path) -> None:
    dirs = SessionDirs(tmp_path)
    for bad in ("..", "a/b", "", ".", "x" * 200, "a\x00b"):
        with pytest.raises(ValueError):
            dirs.path(bad)
