"""Online backups of a data directory, and restoring one into an empty directory.

A backup is one tar file (gzip-compressed when its name ends in `.gz` or `.tgz`):

    manifest.json   what was backed up: Corral and schema versions, store, time
    corral.db       the embedded database (SQLite only), copied with SQLite's backup API
    data/...        the data directory's other files: api_key, vault.key, ca/ (environment
                    CAs), blobs/ (uploaded files), skills/, sessions/ (session workspaces)

The database is copied first, in one read transaction of a connection of our own, so it is a
consistent snapshot however busy the server is (in WAL mode a reader never blocks the
writer); then the files. An upload's blob is written before its row, so every file the
snapshot knows already has its blob on disk. Left out: the database's -wal/-shm (the snapshot
has their committed contents), `sandboxes/` (live sandboxes' state: sandboxes are provisioned
again from their recipe), `layers/` (package layers, rebuilt on first use) and `hands/`.
With PostgreSQL the database is backed up with `pg_dump` (docs/operations.md) and a backup
holds the data directory's files only.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import stat
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from corral import __version__
from corral.store.schema import check_not_newer

DB_NAME = "corral.db"
MANIFEST = "manifest.json"
DATA = "data"
FORMAT = 1
SKIPPED_DIRS = frozenset({"sandboxes", "layers", "hands"})
"""Top-level directories of a data dir that a restored server rebuilds on its own."""
_DB_FILES = frozenset({DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal"})


class BackupError(Exception):
    """A backup or restore that cannot go ahead; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """What a backup holds."""

    format: int
    corral_version: str
    store: str
    """`sqlite` (the database is in the backup) or `postgresql` (it is not: pg_dump)."""
    schema_version: int | None
    created_at: str
    files: int


def backup(data_dir: Path, target: Path, *, sqlite_db: Path | None) -> Manifest:
    """Write a backup of `data_dir` (and of the SQLite database `sqlite_db`, if given) to
    `target`, which must not exist yet. Safe while a server runs on them."""
    if target.exists():
        raise BackupError(f"{target} already exists: choose a new file name")
    if not data_dir.is_dir():
        raise BackupError(f"no data directory at {data_dir}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".corral-backup-", dir=target.parent) as scratch:
        snapshot = Path(scratch) / DB_NAME
        version = None
        if sqlite_db is not None:
            if not sqlite_db.is_file():
                raise BackupError(f"no database at {sqlite_db}")
            version = snapshot_sqlite(sqlite_db, snapshot)
        partial = Path(scratch) / "backup.tar"
        with _open_for_write(partial, compress=target.name.endswith((".gz", ".tgz"))) as tar:
            files = _add_data_dir(tar, data_dir)
            manifest = Manifest(
                format=FORMAT,
                corral_version=__version__,
                store="sqlite" if sqlite_db is not None else "postgresql",
                schema_version=version,
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                files=files,
            )
            if sqlite_db is not None:
                tar.add(snapshot, arcname=DB_NAME)
            _add_bytes(tar, MANIFEST, json.dumps(asdict(manifest), indent=2).encode())
        os.chmod(partial, 0o600)  # it holds the vault key and every secret sealed under it
        os.replace(partial, target)  # never a half-written backup under the final name
    return manifest


def snapshot_sqlite(source: Path, target: Path) -> int:
    """Copy the live database at `source` into `target` (one self-contained file) and check
    it; returns its schema version."""
    src = sqlite3.connect(source, timeout=30)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)  # all pages in one step: one read transaction, one snapshot
            dst.execute("PRAGMA journal_mode=DELETE")  # no -wal beside the copy
            problem = dst.execute("PRAGMA quick_check").fetchone()[0]
            if problem != "ok":
                raise BackupError(f"the copy of {source} fails SQLite's check: {problem}")
            row = dst.execute("SELECT max(version) FROM schema_version").fetchone()
        finally:
            dst.close()
    finally:
        src.close()
    return int(row[0] or 0)


def _open_for_write(path: Path, *, compress: bool) -> tarfile.TarFile:
    return tarfile.open(path, "w:gz", compresslevel=6) if compress else tarfile.open(path, "w")


def _add_data_dir(tar: tarfile.TarFile, data_dir: Path) -> int:
    """Add the data dir's files under `data/`, keeping owners, modes and symlinks; returns
    how many regular files went in. Files may change under our feet (sessions' workspaces):
    one deleted meanwhile is skipped, one that shrank is padded, so the archive stays whole."""
    count = 0
    for root, dirs, names in os.walk(data_dir):
        here = Path(root)
        if here == data_dir:
            dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
            names = [n for n in names if n not in _DB_FILES]
        dirs.sort()
        entries = [here / d for d in dirs if (here / d).is_symlink()]  # walk does not enter
        entries += [here / n for n in sorted(names) if not n.startswith(".upload-")]
        if here != data_dir:
            entries.insert(0, here)
        for path in entries:
            count += _add_one(tar, path, f"{DATA}/{path.relative_to(data_dir)}")
    return count


def _add_one(tar: tarfile.TarFile, path: Path, arcname: str) -> int:
    """Add one entry; 1 if it was a regular file."""
    try:
        info = tar.gettarinfo(path, arcname)
    except FileNotFoundError:
        return 0
    if info is None or not (info.isfile() or info.isdir() or info.issym() or info.islnk()):
        return 0  # sockets (None), fifos, devices: live processes' plumbing, not data
    if not info.isfile():
        tar.addfile(info)
        return 0
    try:
        with path.open("rb") as file:
            tar.addfile(info, _Exactly(file, info.size))
    except FileNotFoundError:
        return 0
    return 1


class _Exactly(io.RawIOBase):
    """A file read as exactly `size` bytes: zeros past an end that moved closer meanwhile
    (tarfile would abort the archive mid-member otherwise)."""

    def __init__(self, file: io.BufferedReader, size: int) -> None:
        self._file, self._left = file, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        # Fill the whole request: tarfile takes a short read for the end of the data.
        want = min(len(buffer), self._left)
        view = memoryview(buffer)[:want]
        filled = 0
        while filled < want:
            got = self._file.readinto(view[filled:]) or 0
            if got == 0:  # the file shrank: pad
                view[filled:] = bytes(want - filled)
                break
            filled += got
        self._left -= want
        return want


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o600
    info.mtime = int(datetime.now(UTC).timestamp())
    tar.addfile(info, io.BytesIO(data))


def read_manifest(source: Path) -> Manifest:
    """The manifest of the backup at `source`."""
    try:
        with tarfile.open(source) as tar:
            member = tar.extractfile(MANIFEST)
            if member is None:
                raise KeyError(MANIFEST)
            data = json.loads(member.read())
    except (OSError, tarfile.TarError, KeyError, ValueError) as exc:
        raise BackupError(f"{source} is not a Corral backup ({exc})") from exc
    if data.get("format") != FORMAT:
        raise BackupError(f"{source} has backup format {data.get('format')}, not {FORMAT}")
    return Manifest(**data)


def restore(source: Path, data_dir: Path) -> Manifest:
    """Unpack the backup at `source` as the data directory `data_dir`, which must be empty
    or missing. Refuses a backup whose schema is newer than this build."""
    manifest = read_manifest(source)
    if manifest.schema_version is not None:
        check_not_newer(manifest.schema_version, "sqlite", f"the backup {source}")
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise BackupError(
            f"{data_dir} is not empty: restore into a new directory (nothing was changed)"
        )
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{data_dir.name}.restore-", dir=data_dir.parent))
    try:
        unpacked = scratch / DATA
        with tarfile.open(source) as tar:
            _extract(tar, scratch)
        unpacked.mkdir(exist_ok=True)
        if manifest.store == "sqlite":
            os.replace(scratch / DB_NAME, unpacked / DB_NAME)
        os.chmod(unpacked, 0o700)
        if data_dir.exists():
            data_dir.rmdir()  # empty, checked above
        os.replace(unpacked, data_dir)  # all of it or nothing under the final name
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return manifest


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack `tar` under `dest` and nowhere else: tarfile's "tar" filter where this Python
    has it (3.11.4 and later), else the same checks here (Debian 12's python3 is 3.11.2)."""
    if hasattr(tarfile, "tar_filter"):
        tar.extractall(dest, filter="tar")
        return
    tar.extractall(dest, members=_checked_members(tar, dest))


def _checked_members(tar: tarfile.TarFile, dest: Path) -> list[tarfile.TarInfo]:
    """Every member, refusing what the "tar" filter refuses: absolute names or names that
    leave `dest` (also through a symbolic link the archive itself makes), hard links to
    outside, devices and fifos; set-id bits are dropped. A symbolic link's own target is
    kept as it is, as the filter keeps it (a sandbox may have linked anywhere)."""
    root = dest.resolve()
    members: list[tarfile.TarInfo] = []
    links: list[str] = []
    for member in tar.getmembers():
        name = member.name.rstrip("/")
        target = (root / name).resolve()
        through_link = any(name.startswith(f"{link}/") for link in links)
        if os.path.isabs(member.name) or not target.is_relative_to(root) or through_link:
            raise BackupError(f"the backup has a member outside the data dir: {member.name!r}")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise BackupError(f"the backup has a special file: {member.name!r}")
        if member.islnk() and not (root / member.linkname).resolve().is_relative_to(root):
            raise BackupError(f"the backup has a link out of the data dir: {member.name!r}")
        if member.issym():
            links.append(name)
        member.mode &= ~(stat.S_ISUID | stat.S_ISGID)
        members.append(member)
    return members
