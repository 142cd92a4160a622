"""`corral backup` of a server under load restores into a working server.

Sessions keep appending (user messages, and the brain's turns they start) while the backup
runs beside the live server; the restored data directory then serves, through the SDK, every
session and every event that existed when the backup started, the uploaded file and the
vault key, and its sessions go on taking turns. A restore never overwrites a data directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import pytest

from tests.api.helpers import assert_log_sound, events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, ScriptedTurns, Text, Turn
from tests.server import DATABASE_URL_ENV, ServerProcess, fresh_postgres

NOTES = b"kept across a restore\n"


def corral(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CORRAL_"))}
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


class Load:
    """Threads sending user messages to sessions until stopped."""

    def __init__(self, server: ServerProcess, sessions: list[str]) -> None:
        self.server, self.stop, self.sent = server, threading.Event(), 0
        self.errors: list[anthropic.APIError] = []
        self.threads = [threading.Thread(target=self._run, args=(s,)) for s in sessions]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _run(self, session_id: str) -> None:
        client = self.server.client()
        while not self.stop.is_set():
            try:
                say(client, session_id, f"message {self.sent}")
                self.sent += 1
            except anthropic.APIError as exc:
                self.errors.append(exc)
            time.sleep(0.02)


def ids(client: anthropic.Anthropic, session_id: str) -> list[str]:
    return [e.id for e in events(client, session_id)]


def test_backup_under_load_restores_into_a_working_server(
    tmp_path: Path, fake_model: FakeModelServer
) -> None:
    fake_model.reset(ScriptedTurns([Turn([Text("noted")])], repeat_last=True))
    live = ServerProcess(tmp_path / "live", model_url=fake_model.url).start()
    try:
        client = live.client()
        uploaded = client.beta.files.upload(file=("notes.txt", NOTES, "text/plain"))
        sessions = [make_session(client)[0] for _ in range(3)]
        with Load(live, sessions) as load:
            time.sleep(1.0)  # the load is under way
            before = {sid: ids(client, sid) for sid in sessions}
            sent = load.sent
            # relative paths, from the folder the operator is in
            backed_up = corral(tmp_path, "backup", "backup.tar", "--data-dir", "live")
            during = load.sent - sent
        assert backed_up.returncode == 0, backed_up.stderr
        assert not load.errors, load.errors[:3]
        assert during > 0, "no append ran while the backup did"
        live_logs = {sid: ids(client, sid) for sid in sessions}
    finally:
        live.stop()

    restored = corral(tmp_path, "restore", "backup.tar", "--data-dir", "restored")
    assert restored.returncode == 0, restored.stderr
    assert (tmp_path / "restored" / "vault.key").read_bytes() == (
        tmp_path / "live" / "vault.key"
    ).read_bytes()

    server = ServerProcess(tmp_path / "restored", model_url=fake_model.url).start()
    try:
        client = server.client()
        listed = {s.id for s in client.beta.sessions.list(limit=100)}
        assert set(sessions) <= listed
        for sid in sessions:
            log = events(client, sid)
            assert_log_sound(log)
            got = [e.id for e in log]
            assert got[: len(before[sid])] == before[sid]  # all that existed at the backup
            common = next(
                (i for i, (a, b) in enumerate(zip(got, live_logs[sid], strict=False)) if a != b),
                min(len(got), len(live_logs[sid])),
            )
            assert common >= len(before[sid])  # then the live log, up to the snapshot
        assert client.beta.files.download(uploaded.id).read() == NOTES
        # the restored server takes turns: the model answers a new message
        wait_idle(client, sessions[0], stop="end_turn", timeout=60)
        mark = len(events(client, sessions[0]))
        say(client, sessions[0], "after the restore")
        wait_idle(client, sessions[0], stop="end_turn", after=mark, timeout=60)
    finally:
        server.stop()


def test_restore_refuses_a_data_dir_that_is_not_empty(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()  # migrate makes the database, never the data dir (docs/startup.md)
    assert corral(tmp_path, "migrate", "--data-dir", "data").returncode == 0
    (data / "api_key").write_text("precious\n")
    made = corral(tmp_path, "backup", "b.tar.gz", "--data-dir", "data")
    assert made.returncode == 0, made.stderr
    refused = corral(tmp_path, "restore", "b.tar.gz", "--data-dir", "data")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "not empty" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (data / "api_key").read_text() == "precious\n"
    again = corral(tmp_path, "backup", "b.tar.gz", "--data-dir", "data")
    assert again.returncode == 2 and "already exists" in again.stderr


@pytest.mark.skipif(not os.environ.get(DATABASE_URL_ENV), reason=f"{DATABASE_URL_ENV} not set")
def test_postgres_pg_dump_and_data_dir_backup_restore_as_documented(
    tmp_path: Path, fake_model: FakeModelServer
) -> None:
    """docs/operations.md: pg_dump the database, then `corral backup` the data dir's files;
    pg_restore into a new database and `corral restore` the files."""
    fake_model.reset(ScriptedTurns([Turn([Text("noted")])], repeat_last=True))
    with fresh_postgres("corral_backup") as url, fresh_postgres("corral_restored") as new_url:
        env = {"CORRAL_DATABASE_URL": url}
        live = ServerProcess(tmp_path / "live", model_url=fake_model.url, env=env).start()
        try:
            client = live.client()
            uploaded = client.beta.files.upload(file=("notes.txt", NOTES, "text/plain"))
            sessions = [make_session(client)[0] for _ in range(2)]
            with Load(live, sessions) as load:
                time.sleep(1.0)
                before = {sid: ids(client, sid) for sid in sessions}
                dumped = subprocess.run(
                    ["pg_dump", "--format=custom", "--file", "corral.dump", url],
                    cwd=tmp_path,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                files = corral(
                    tmp_path, "backup", "files.tar", "--data-dir", "live", "--database-url", url
                )
            assert dumped.returncode == 0, dumped.stderr
            assert files.returncode == 0, files.stderr
            assert "pg_dump" in files.stdout  # the database is not in the file: it says so
            assert not load.errors, load.errors[:3]
        finally:
            live.stop()
        loaded = subprocess.run(
            ["pg_restore", "--no-owner", "--dbname", new_url, "corral.dump"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert loaded.returncode == 0, loaded.stderr
        restored = corral(tmp_path, "restore", "files.tar", "--data-dir", "restored")
        assert restored.returncode == 0, restored.stderr
        assert "pg_restore" in restored.stdout
        env = {"CORRAL_DATABASE_URL": new_url}
        server = ServerProcess(tmp_path / "restored", model_url=fake_model.url, env=env).start()
        try:
            client = server.client()
            for sid in sessions:
                got = ids(client, sid)
                assert got[: len(before[sid])] == before[sid]
            assert client.beta.files.download(uploaded.id).read() == NOTES
        finally:
            server.stop()
