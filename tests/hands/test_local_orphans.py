"""No sandbox outlives the process that provisioned it, however that process dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.hands.conftest import needs_bwrap
from tests.hands.test_local_lifecycle import host_processes_with

ROOT = Path(__file__).resolve().parents[2]

OWNER = textwrap.dedent(
    """
    import os, signal, sys
    import anyio
    from corral.hands.local import LocalHands
    from tests.hands.conftest import make_recipe
    from tests.uids import WORKER_UIDS

    async def main(tmp, marker):
        hands = LocalHands(tmp / "hands-state", uid_range=WORKER_UIDS)
        sandbox = await hands.provision(make_recipe(tmp))
        script = f"{marker}.sh"
        await sandbox.execute("write", {"file_path": script, "content": "sleep 1000\\n"})
        command = f"setsid bash {script} & (bash {script} &) ; bash {script} &"
        await sandbox.execute("bash", {"command": command})
        print("ready", flush=True)
        await anyio.sleep(1000)

    from pathlib import Path
    anyio.run(main, Path(sys.argv[1]), sys.argv[2])
    """
)


@pytest.mark.bwrap
@needs_bwrap
@pytest.mark.parametrize("group", [False, True], ids=["owner", "owner's process group"])
def test_sigkill_of_the_owner_ends_its_sandboxes(tmp_path: Path, group: bool) -> None:
    marker = f"corral-orphan-{os.getpid()}-{int(group)}"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path), marker],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a server under a service manager
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while len(host_processes_with(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(host_processes_with(marker)) >= 3
    finally:
        if group:
            os.killpg(owner.pid, signal.SIGKILL)
        else:
            owner.kill()
        owner.wait()
    deadline = time.monotonic() + 10
    while host_processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert host_processes_with(marker) == []
    assert [line for line in host_processes_with("bwrap") if str(tmp_path) in line] == []
