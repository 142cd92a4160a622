"""What a backup holds: the data dir's files with their modes and links, a database snapshot
that opens on its own, and nothing that a restored server rebuilds or that is not a file
(sockets and fifos of live processes, uploads still being written, live sandboxes' state).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import tarfile
from pathlib import Path

import pytest

from corral.store.backup import BackupError, _Exactly, backup, restore
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
