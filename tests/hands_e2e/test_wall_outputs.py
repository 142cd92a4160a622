"""What the host reads out of /mnt/session/outputs: SDK -> server -> bubblewrap, model-scripted.

The sandbox is the adversary here: it races the collector with RENAME_EXCHANGE, writes into
subdirectories, floods a directory, and leaves sparse giants and HTML behind.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.server import API_KEY, ServerProcess, backend_env

TOOLSET = {"type": "agent_toolset_20260401"}
OUT = "/mnt/session/outputs"
CANARY = "host-canary-1d7f0b"
MAX_FILES = 50
SESSION_BYTES = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[ServerProcess]:
    """A server with small outputs limits, so flooding them costs little."""
    with backend_env(backend) as env:
        env = {
            **env,
            "CORRAL_OUTPUTS_MAX_FILES": str(MAX_FILES),
            "CORRAL_OUTPUTS_MAX_BYTES_PER_SESSION": str(SESSION_BYTES),
        }
        proc = ServerProcess(
            tmp_path_factory.mktemp("corral"), model_url=fake_model.url, env=env
        ).start()
        yield proc
        proc.stop()


def new_session(client: anthropic.Anthropic) -> str:
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="out", tools=[TOOLSET])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def run_bash(
    client: anthropic.Anthropic, fake: FakeModelServer, session_id: str, commands: list[str]
) -> list[Any]:
    """One turn in which the model runs `commands` in order; returns their tool results."""
    fake.reset([Turn([ToolUse("bash", {"command": c}) for c in commands]), Turn([Text("done")])])
    n = len(events(client, session_id))
    say(client, session_id, "run")
    wait_idle(client, session_id, stop="end_turn", after=n, timeout=120)
    return [e for e in events(client, session_id)[n:] if e.type == "agent.tool_result"]


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


def outputs(client: anthropic.Anthropic, session_id: str) -> dict[str, bytes]:
    """filename -> content of every file object scoped to the session."""
    found: dict[str, bytes] = {}
    for meta in client.beta.files.list(scope_id=session_id, limit=1000):
        assert meta.filename not in found, f"duplicate output {meta.filename}"
        found[meta.filename] = client.beta.files.download(meta.id).read()
    return found


SWAPPER = f"""import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
os.chdir("{OUT}")
end, n = time.monotonic() + 60, 0
while time.monotonic() < end and not os.path.exists("/tmp/stop"):
    for _ in range(500):
        libc.renameat2(-100, b"sub", -100, b"link", 2)
    n += 500
open("/tmp/swaps", "w").write(str(n))
"""
# Every call (re)starts the swapper if it is not running: a collector that fails and gets the
# sandbox discarded must still face the race on the next call.
ENSURE_SWAPPER = (
    "[ -e /tmp/swapping ] || { touch /tmp/swapping; "
    "nohup python3 /workspace/swap.py >/dev/null 2>&1 & }; true"
)


def test_swapping_a_directory_for_a_symlink_never_publishes_host_files(
    server: ServerProcess, fake_model: FakeModelServer, tmp_path: Path
) -> None:
    """A background process swaps outputs/sub with a symlink to a host directory holding a
    canary while many tool calls each collect outputs: the canary never becomes an output."""
    host_dir = tmp_path / "host-secrets"
    host_dir.mkdir()
    (host_dir / "canary.txt").write_text(CANARY)
    client = server.client()
    session_id = new_session(client)
    setup = (
        f"cat > /workspace/swap.py <<'EOF'\n{SWAPPER}EOF\n"
        f"mkdir -p {OUT}/sub && echo harmless > {OUT}/sub/real.txt && "
        f"ln -sfn {host_dir} {OUT}/link && echo ready"
    )
    stop = "touch /tmp/stop; sleep 1; cat /tmp/swaps"
    results = run_bash(client, fake_model, session_id, [setup] + [ENSURE_SWAPPER] * 40 + [stop])
    for meta in client.beta.files.list(scope_id=session_id, limit=1000):
        data = client.beta.files.download(meta.id).read()
        assert CANARY.encode() not in data, f"{meta.filename} holds a host file"
        assert "canary" not in meta.filename and data == b"harmless\n"
    assert [text_of(r) for r in results if r.is_error] == []
    assert int(text_of(results[-1]).strip()) > 10_000, "the swapper did not run"
    assert outputs(client, session_id), "nothing was collected at all"


def test_subdirectory_outputs_are_collected_once_under_their_path(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    session_id = new_session(client)
    write = (
        f"mkdir -p {OUT}/reports {OUT}/a/b && echo one > {OUT}/reports/summary.md && "
        f"echo top > {OUT}/top.txt && echo deep > {OUT}/a/b/c.txt"
    )
    run_bash(client, fake_model, session_id, [write, "true", "true", "true", "true", "true"])
    expected = {"reports/summary.md": b"one\n", "top.txt": b"top\n", "a/b/c.txt": b"deep\n"}
    assert outputs(client, session_id) == expected
    run_bash(client, fake_model, session_id, [f"echo two > {OUT}/reports/summary.md", "true"])
    assert outputs(client, session_id) == {**expected, "reports/summary.md": b"two\n"}


def test_file_count_cap_is_checked_per_entry(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    """One directory holding more files than the cap: the cap still holds, and the call says so."""
    client = server.client()
    session_id = new_session(client)
    flood = f"mkdir -p {OUT}/many && cd {OUT}/many && for i in $(seq 80); do echo $i > f$i; done"
    results = run_bash(client, fake_model, session_id, [flood, "echo after"])
    assert len(list(client.beta.files.list(scope_id=session_id, limit=1000))) == MAX_FILES
    assert results[0].is_error and str(MAX_FILES) in text_of(results[0])
    assert not results[1].is_error and text_of(results[1]).strip() == "after"


def test_sparse_giant_is_a_tool_error_and_later_calls_work(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    """600 MB of holes is refused by its size (nothing is read); the next calls are unharmed."""
    client = server.client()
    session_id = new_session(client)
    results = run_bash(
        client,
        fake_model,
        session_id,
        [f"truncate -s 600M {OUT}/big.bin && echo small > {OUT}/small.txt && echo made"],
    )
    assert results[0].is_error
    assert "made" in text_of(results[0]) and "big.bin" in text_of(results[0])
    results = run_bash(client, fake_model, session_id, ["echo still-fine", "echo again"])
    assert [(r.is_error, text_of(r).strip()) for r in results] == [
        (False, "still-fine"),
        (False, "again"),
    ]
    assert outputs(client, session_id) == {"small.txt": b"small\n"}


def test_session_outputs_quota(server: ServerProcess, fake_model: FakeModelServer) -> None:
    client = server.client()
    session_id = new_session(client)
    mib = 1024 * 1024
    results = run_bash(
        client,
        fake_model,
        session_id,
        [
            f"head -c {mib} /dev/zero > {OUT}/one.bin",
            f"head -c {mib // 2} /dev/zero > {OUT}/two.bin",
            f"head -c {mib} /dev/zero > {OUT}/three.bin",
            f"rm {OUT}/one.bin; head -c {mib // 4} /dev/zero > {OUT}/one.bin",
        ],
    )
    assert [r.is_error for r in results] == [False, False, True, False]
    assert "three.bin" in text_of(results[2])
    sizes = {f.filename: f.size_bytes for f in client.beta.files.list(scope_id=session_id)}
    assert sizes == {"one.bin": mib // 4, "two.bin": mib // 2, "three.bin": mib}, "room freed"


def test_html_output_downloads_as_an_attachment(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    session_id = new_session(client)
    run_bash(client, fake_model, session_id, [f"echo '<script>alert(1)</script>' > {OUT}/x.html"])
    (meta,) = client.beta.files.list(scope_id=session_id)
    response = httpx.get(f"{server.url}/v1/files/{meta.id}/content", headers={"x-api-key": API_KEY})
    assert response.status_code == 200
    assert response.headers["content-disposition"] == "attachment; filename*=UTF-8''x.html"
    assert response.headers["x-content-type-options"] == "nosniff"


def test_deleted_sessions_outputs_are_gone(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    session_id = new_session(client)
    run_bash(client, fake_model, session_id, [f"echo kept > {OUT}/report.md"])
    (meta,) = client.beta.files.list(scope_id=session_id)
    client.beta.sessions.delete(session_id)
    assert list(client.beta.files.list(scope_id=session_id)) == []
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.download(meta.id)
    with pytest.raises(anthropic.NotFoundError):
        client.beta.files.retrieve_metadata(meta.id)
