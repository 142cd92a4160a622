"""A really full disk (a small tmpfs as the data dir, filled to the last byte) is said out
loud: the API answers 507 naming the data dir on a connection that stays usable, the turn in
flight ends in a `session.error` naming the disk once space is freed (its lost tool call
blamed on the disk, not on a restart), and the log has each condition once.

Needs root (to mount the tmpfs); skipped otherwise.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest

from tests.api.helpers import events, make_session, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import API_KEY, ServerProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]
TOOLS = [{"type": "agent_toolset_20260401"}]
MESSAGE = [{"type": "user.message", "content": [{"type": "text", "text": "again"}]}]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for this test (unmounted after, even while files are open)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path) -> Path:
    """A file eating every free byte of `disk`."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as out:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
    with pytest.raises(OSError) as full:
        (disk / "probe").write_bytes(b"x" * 4096)
    assert full.value.errno == errno.ENOSPC
    return filler


def raw_send(conn: http.client.HTTPConnection, session_id: str) -> tuple[int, dict[str, object]]:
    """POST a user message on `conn` (kept alive); the status and the JSON body."""
    conn.request(
        "POST",
        f"/v1/sessions/{session_id}/events?beta=true",
        body=json.dumps({"events": MESSAGE}),
        headers={"x-api-key": API_KEY, "content-type": "application/json"},
    )
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def test_full_disk_is_507_and_the_turn_ends_in_an_error_when_space_returns(
    tmp_path: Path, small_disk: Path
) -> None:
    data = small_disk / "data"
    script = [
        Turn([ToolUse("bash", {"command": "echo warm"})]),  # the sandbox is ready before...
        Turn([Text("warm")]),
        Turn([ToolUse("bash", {"command": "sleep 3; echo ran"})]),  # ...the call in flight
        Turn([Text("never")]),
    ]
    with FakeModelServer(script) as fake:
        server = ServerProcess(data, model_url=fake.url)
        server.log_path = tmp_path / "server.log"  # off the full disk, or its lines are lost
        server.start()
        try:
            client = server.client()
            session_id, _ = make_session(client, tools=TOOLS)
            say(client, session_id, "warm up")
            wait_idle(client, session_id, stop="end_turn", timeout=60)
            say(client, session_id, "run it")
            deadline = time.monotonic() + 30
            while sum(e.type == "agent.tool_use" for e in events(client, session_id)) < 2:
                assert time.monotonic() < deadline, "the model never asked for the tool"
                time.sleep(0.05)
            time.sleep(0.5)  # the call is running
            filler = fill(small_disk)

            with pytest.raises(anthropic.InternalServerError) as refused:
                client.beta.sessions.events.send(session_id, events=MESSAGE)  # type: ignore[arg-type]
            assert refused.value.status_code == 507
            assert f"disk is full (data dir {data})" in str(refused.value.message)
            with pytest.raises(anthropic.InternalServerError) as refused:
                client.beta.files.upload(file=("notes.txt", b"x" * 65536, "text/plain"))
            assert refused.value.status_code == 507
            assert f"disk is full (files dir {data / 'blobs'})" in str(refused.value.message)

            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            status, body = raw_send(conn, session_id)
            sock = conn.sock
            assert status == 507, body
            assert body["error"]["type"] == "api_error"  # type: ignore[index]
            status, _ = raw_send(conn, session_id)  # the same connection answers again
            assert status == 507
            assert conn.sock is sock, "the server dropped the kept-alive connection"
            conn.close()

            time.sleep(6)  # the tool finishes, its result cannot be written; polls go by
            filler.unlink()
            idle = wait_idle(client, session_id, stop="retries_exhausted", timeout=60)
            log = events(client, session_id)
        finally:
            server.stop()
    assert idle.stop_reason.type == "retries_exhausted"
    errors = [e for e in log if e.type == "session.error"]
    assert len(errors) == 1
    assert f"disk is full (data dir {data})" in errors[0].error.message
    results = [e for e in log if e.type == "agent.tool_result"]
    assert len(results) == 2
    text = results[1].content[0].text
    assert "could not be recorded" in text and "disk is full" in text
    assert "restarted" not in text
    assert not any(e.type == "user.message" and e.content[0].text == "again" for e in log)
    lines = server.log_path.read_text()
    assert lines.count(f"disk full: cannot write {data / 'corral.db'}") == 1, lines[-3000:]
    assert lines.count("disk space back: writes resumed") == 1, lines[-3000:]
    assert "claim failed" not in lines
    assert "Traceback" not in lines, lines[-3000:]
