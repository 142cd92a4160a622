"""The beneath-walker against symlinks, FIFOs, swaps mid-walk and a racing RENAME_EXCHANGE."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.files.beneath import NotRegularFile, Tree

CANARY = b"host-canary-6f1c"
AT_FDCWD = -100
RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: Path, b: Path) -> None:
    """renameat2(RENAME_EXCHANGE): the swap a sandboxed process can do on its outputs."""
    if _libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE):
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


@pytest.fixture(params=[True, False], ids=["openat2", "per-component"])
def use_openat2(request: pytest.FixtureRequest) -> bool:
    """Both resolution strategies must hold the same line."""
    return bool(request.param)


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """root/ (the sandbox's tree) and host/ (a host dir with a canary file)."""
    root, host = tmp_path / "root", tmp_path / "host"
    (root / "sub").mkdir(parents=True)
    host.mkdir()
    (host / "secret.txt").write_bytes(CANARY)
    (root / "a.txt").write_bytes(b"a")
    (root / "sub" / "secret.txt").write_bytes(b"harmless")
    (root / "link").symlink_to(host)
    yield root, host


def read_all(tree: Tree) -> list[tuple[tuple[str, ...], bytes]]:
    """Every file the walk offers, read through `open_file` (what the outputs collector does)."""
    out = []
    for found in tree.walk():
        try:
            fd = tree.open_file(found.parts)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as handle:
            out.append((found.parts, handle.read()))
    return out


def test_symlinks_fifos_and_dirs_are_not_files(
    layout: tuple[Path, Path], use_openat2: bool
) -> None:
    root, host = layout
    os.mkfifo(root / "pipe")
    (root / "file-link").symlink_to(host / "secret.txt")
    with Tree(root, use_openat2=use_openat2) as tree:
        assert read_all(tree) == [(("a.txt",), b"a"), (("sub", "secret.txt"), b"harmless")]
        for parts in [("link", "secret.txt"), ("file-link",)]:
            with pytest.raises(OSError) as info:
                tree.open_file(parts)
            assert info.value.errno in (errno.ELOOP, errno.ENOTDIR)
        for parts in [("pipe",), ("sub",)]:
            with pytest.raises(NotRegularFile):
                tree.open_file(parts)
        for parts in [("..", "host", "secret.txt"), ("sub/../a.txt",), ("",)]:
            with pytest.raises(OSError):
                tree.open_file(parts)


def test_a_hard_link_is_a_regular_file(layout: tuple[Path, Path], use_openat2: bool) -> None:
    root, _ = layout
    os.link(root / "a.txt", root / "sub" / "hard.txt")
    with Tree(root, use_openat2=use_openat2) as tree:
        assert (("sub", "hard.txt"), b"a") in read_all(tree)


def test_swap_between_listing_and_descending(layout: tuple[Path, Path], use_openat2: bool) -> None:
    """Deterministic: the walk lists root (sub is a directory), then sub becomes a symlink to
    the host dir before the walk goes into it."""
    root, _ = layout
    with Tree(root, use_openat2=use_openat2) as tree:
        walk = tree.walk()
        first = next(walk)
        assert first.parts == ("a.txt",)
        exchange(root / "sub", root / "link")
        assert (root / "sub").is_symlink()
        rest = list(walk)
        assert rest == []
        for parts in [("sub", "secret.txt"), ("link", "secret.txt")]:
            try:
                fd = tree.open_file(parts)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as handle:
                assert handle.read() != CANARY


def test_swap_between_listing_and_opening(layout: tuple[Path, Path], use_openat2: bool) -> None:
    """Deterministic: a file was listed under sub, then sub is swapped before it is opened."""
    root, _ = layout
    with Tree(root, use_openat2=use_openat2) as tree:
        found = [f.parts for f in tree.walk()]
        assert ("sub", "secret.txt") in found
        exchange(root / "sub", root / "link")
        with pytest.raises(OSError) as info:
            tree.open_file(("sub", "secret.txt"))
        assert info.value.errno in (errno.ELOOP, errno.ENOTDIR)


def test_racing_rename_exchange_never_reads_the_canary(
    layout: tuple[Path, Path], use_openat2: bool
) -> None:
    """A thread keeps swapping sub with a symlink to the host dir while the tree is walked and
    read many times: the walk sees sub's own file sometimes, the host's canary never."""
    root, _ = layout
    stop = threading.Event()
    swaps = 0

    def swapper() -> None:
        nonlocal swaps
        while not stop.is_set():
            exchange(root / "sub", root / "link")
            swaps += 1

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    seen_sub = 0
    try:
        with Tree(root, use_openat2=use_openat2) as tree:
            for _ in range(2000):
                for parts, data in read_all(tree):
                    assert data != CANARY, parts
                    seen_sub += parts[0] in ("sub", "link")
    finally:
        stop.set()
        thread.join()
    assert swaps > 100, "the swapper did not run: the test proved nothing"
    assert seen_sub > 0, "the walk never reached the real directory: the test proved nothing"


def test_walk_limits(tmp_path: Path) -> None:
    root = tmp_path / "root"
    deep = root.joinpath(*["d"] * 5)
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"x")
    with Tree(root) as tree:
        assert [f.parts for f in tree.walk(max_depth=3)] == []
        assert tree.truncated
    with Tree(root) as tree:
        assert [f.parts for f in tree.walk()] == [("d",) * 5 + ("f",)]
        assert not tree.truncated
    for i in range(10):
        (root / f"f{i}").write_bytes(b"x")
    with Tree(root) as tree:
        assert len(list(tree.walk(max_entries=5))) == 5
        assert tree.truncated
