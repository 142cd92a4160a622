"""`corral demo` end to end: embedded server, SDK client, scripted model, real sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_command_solves_the_incident_offline(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env["CORRAL_CONFIG"] = str(tmp_path / "absent.toml")
    done = subprocess.run(
        [sys.executable, "-m", "corral", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "solved" in done.stdout and "scripted" in done.stdout
    # stderr (not a terminal here) holds JSON lines, without a line per HTTP request
    assert "HTTP Request:" not in done.stderr
    assert '"logger": "corral.http"' not in done.stderr
    report = (tmp_path / "corral-demo-outputs" / "postmortem.md").read_text()
    assert "a3f9c21" in report and "c81d4e7" in report
