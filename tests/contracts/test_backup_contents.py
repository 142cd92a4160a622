"""What a backup holds: the data dir's files with their modes and links, a database snapshot
that opens on its own, and nothing that a restored server rebuilds or that is not a file
(sockets and fifos of live processes, uploads still being written, live sandboxes' state).
"""

from __future__ import annotations

import io
import os
import socket
import sqlite3
import tarfile
from pathlib import Path

import pytest

from corral.store.backup import BackupError, _checked_members, _Exactly, backup, restore
from corral.store.sqlite_db import schema_version


def make_data_dir(root: Path) -> Path:
    data = root / "data"
    (data / "blobs" / "ab").mkdir(parents=True)
    (data / "blobs" / "ab" / "abcdef").write_bytes(b"blob")
    (data / "blobs" / ".upload-123").write_bytes(b"half")
    (data / "sessions" / "sesn_1" / "workspace").mkdir(parents=True)
    script = data / "sessions" / "sesn_1" / "workspace" / "run.sh"
    script.write_text("echo hi\n")
    script.chmod(0o750)
    (data / "sessions" / "sesn_1" / "workspace" / "link").symlink_to("/etc/passwd")
    os.mkfifo(data / "sessions" / "sesn_1" / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(data / "sessions" / "sesn_1" / "agent.sock"))
    sock.close()
    (data / "sandboxes" / "host-1").mkdir(parents=True)
    (data / "sandboxes" / "host-1" / "state").write_text("live")
    (data / "layers").mkdir()
    (data / "vault.key").write_text("key\n")
    schema_version(data / "corral.db")
    with sqlite3.connect(data / "corral.db") as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE marker (n INTEGER)")
        conn.execute("INSERT INTO marker VALUES (42)")
    return data


def test_a_backup_restores_the_files_and_a_database_that_opens_alone(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path)
    keep = sqlite3.connect(data / "corral.db")  # a live connection: the WAL is in use
    try:
        manifest = backup(data, tmp_path / "b.tar", sqlite_db=data / "corral.db")
    finally:
        keep.close()
    assert manifest.store == "sqlite" and manifest.schema_version == schema_version(
        data / "corral.db"
    )
    assert oct((tmp_path / "b.tar").stat().st_mode & 0o777) == "0o600"
    out = tmp_path / "restored"
    restore(tmp_path / "b.tar", out)
    assert (out / "blobs" / "ab" / "abcdef").read_bytes() == b"blob"
    assert (out / "vault.key").read_text() == "key\n"
    script = out / "sessions" / "sesn_1" / "workspace" / "run.sh"
    assert script.read_text() == "echo hi\n" and script.stat().st_mode & 0o777 == 0o750
    assert os.readlink(out / "sessions" / "sesn_1" / "workspace" / "link") == "/etc/passwd"
    for gone in ("blobs/.upload-123", "sessions/sesn_1/pipe", "sessions/sesn_1/agent.sock"):
        assert not os.path.lexists(out / gone), gone
    assert not (out / "sandboxes").exists() and not (out / "layers").exists()
    assert not (out / "corral.db-wal").exists()
    with sqlite3.connect(out / "corral.db") as conn:
        assert conn.execute("SELECT n FROM marker").fetchall() == [(42,)]
    assert out.stat().st_mode & 0o777 == 0o700


def test_backup_never_overwrites_and_restore_never_overwrites(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path)
    target = tmp_path / "b.tar.gz"
    backup(data, target, sqlite_db=data / "corral.db")
    with pytest.raises(BackupError, match="already exists"):
        backup(data, target, sqlite_db=data / "corral.db")
    with pytest.raises(BackupError, match="not empty"):
        restore(target, data)
    empty = tmp_path / "empty"
    empty.mkdir()
    restore(target, empty)  # an empty directory is fine
    assert (empty / "vault.key").exists()
    with pytest.raises(BackupError, match="not a Corral backup"):
        restore(data / "vault.key", tmp_path / "other")


def test_a_file_that_changes_size_while_archived_keeps_the_archive_whole(tmp_path: Path) -> None:
    """A workspace file rewritten during the backup: the archive stays readable (the entry
    has the size seen first: padded if the file shrank, cut if it grew)."""
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100_000)
    with tarfile.open(tmp_path / "t.tar", "w") as tar:
        info = tar.gettarinfo(path, "shrank")
        path.write_bytes(b"y" * 10)
        with path.open("rb") as file:
            tar.addfile(info, _Exactly(file, info.size))
        info = tar.gettarinfo(path, "grew")
        path.write_bytes(b"z" * 50)
        with path.open("rb") as file:
            tar.addfile(info, _Exactly(file, info.size))
    with tarfile.open(tmp_path / "t.tar") as tar:
        shrank, grew = (tar.extractfile(name).read() for name in ("shrank", "grew"))  # type: ignore[union-attr]
    assert shrank == b"y" * 10 + bytes(99_990)
    assert grew == b"z" * 10


def _tar_with(tmp_path: Path, *members: tarfile.TarInfo) -> Path:
    path = tmp_path / "crafted.tar"
    with tarfile.open(path, "w") as tar:
        for member in members:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = 1 if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(
    "member",
    [
        _member("/etc/evil"),
        _member("data/../../evil"),
        _member("data/hard", tarfile.LNKTYPE, "../../outside"),
        _member("data/fifo", tarfile.FIFOTYPE),
    ],
    ids=["absolute", "dot-dot", "hard link out", "fifo"],
)
def test_the_checks_for_pythons_without_tar_filters_refuse_escapes(
    tmp_path: Path, member: tarfile.TarInfo
) -> None:
    """Debian 12's python3 (3.11.2) has no `filter=`: restore checks the members itself."""
    with tarfile.open(_tar_with(tmp_path, member)) as tar, pytest.raises(BackupError):
        _checked_members(tar, tmp_path / "dest")


def test_the_checks_refuse_a_file_written_through_a_link_of_the_archive(tmp_path: Path) -> None:
    link = _member("data/etc", tarfile.SYMTYPE, "/etc")
    crafted = _tar_with(tmp_path, link, _member("data/etc/evil"))
    with tarfile.open(crafted) as tar, pytest.raises(BackupError, match="outside"):
        _checked_members(tar, tmp_path / "dest")


def test_the_checks_keep_what_a_data_dir_holds(tmp_path: Path) -> None:
    setuid = _member("data/sessions/s/workspace/tool")
    setuid.mode = 0o4755
    members = [
        _member("data", tarfile.DIRTYPE),
        _member("data/sessions/s/workspace/notes.txt"),
        _member("data/sessions/s/workspace/latest", tarfile.SYMTYPE, "notes.txt"),
        _member("data/sessions/s/workspace/system", tarfile.SYMTYPE, "/etc/passwd"),
        setuid,
    ]
    with tarfile.open(_tar_with(tmp_path, *members)) as tar:
        kept = _checked_members(tar, tmp_path / "dest")
    assert [m.name for m in kept] == [m.name for m in members]
    assert kept[-1].mode == 0o755
