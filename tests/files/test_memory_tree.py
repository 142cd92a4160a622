"""The memory mount's host side against hostile trees: links, FIFOs, bad names, big or
binary files; writes never leave the mount."""

from __future__ import annotations

import os
from pathlib import Path

from corral.files import memory_tree
from corral.wire.memory_stores import MAX_CONTENT_BYTES


def test_scan_keeps_only_what_can_be_a_memory(tmp_path: Path) -> None:
    root = tmp_path / "mount"
    outside = tmp_path / "secret.txt"
    outside.write_text("host secret")
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "a.md").write_text("héllo")
    (root / "empty.md").write_text("")
    (root / "link.md").symlink_to(outside)
    (root / "linkdir").symlink_to(tmp_path)
    os.mkfifo(root / "pipe")
    (root / "big.md").write_bytes(b"a" * (MAX_CONTENT_BYTES + 1))
    (root / "edge.md").write_bytes(b"a" * MAX_CONTENT_BYTES)
    (root / "binary.bin").write_bytes(b"\xff\xfe\x00")
    (root / "ctl\x01.md").write_text("x")
    (root / os.fsdecode(b"bad\xffname")).write_text("x")

    seen = memory_tree.scan(root)
    assert sorted(seen.files) == ["/edge.md", "/empty.md", "/notes/a.md"]
    assert seen.files["/notes/a.md"] == "héllo"
    assert "host secret" not in "".join(seen.files.values())
    assert "/big.md" in seen.refused and "/binary.bin" in seen.refused
    assert any("ctl" in path for path in seen.refused)
    assert any("bad" in path for path in seen.refused)
    assert not any("link" in path or "pipe" in path for path in (*seen.files, *seen.refused))
    assert not seen.truncated


def test_writes_stay_beneath_the_mount(tmp_path: Path) -> None:
    root = tmp_path / "mount"
    root.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (root / "sub").symlink_to(victim)  # the sandbox swapped a directory for a link
    assert memory_tree.write(root, "/sub/x.md", "payload") is False
    assert list(victim.iterdir()) == []
    target = tmp_path / "target.txt"
    target.write_text("keep")
    (root / "file.md").symlink_to(target)
    assert memory_tree.write(root, "/file.md", "payload") is False
    assert target.read_text() == "keep"
    memory_tree.remove(root, "/file.md")  # a link is not a memory file: left alone
    assert (root / "file.md").is_symlink()

    assert memory_tree.write(root, "/deep/er/new.md", "content") is True
    assert (root / "deep" / "er" / "new.md").read_text() == "content"
    assert memory_tree.write(root, "/deep/er/new.md", "shorter") is True
    assert (root / "deep" / "er" / "new.md").read_text() == "shorter"
    (root / "dir.md").mkdir()
    assert memory_tree.write(root, "/dir.md", "x") is False
    memory_tree.remove(root, "/deep/er/new.md")
    assert not (root / "deep" / "er" / "new.md").exists()


def test_fresh_dir_removes_a_planted_tree_without_following_links(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("x")
    root = tmp_path / "memory" / "notes"
    root.mkdir(parents=True)
    (root / "escape").symlink_to(keep)
    (root / "sub").mkdir()
    (root / "sub" / "f").write_text("y")
    memory_tree.fresh_dir(root, 0o755)
    assert list(root.iterdir()) == [] and (keep / "precious").exists()
    assert root.stat().st_mode & 0o777 == 0o755
