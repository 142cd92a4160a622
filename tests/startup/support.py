"""`corral` run as a user runs it: `python -m corral ...` in a working directory of its own,
with no CORRAL_* or ANTHROPIC_* variables but those a test gives, and stderr kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

# Kept: the sandbox uid slice of this pytest worker (tests/uids.py).
KEPT = ("CORRAL_SANDBOX_UID_RANGE",)


def user_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test process's environment without Corral's and Anthropic's settings, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CORRAL_", "ANTHROPIC_")) or k in KEPT
    }
    return {**env, **(extra or {})}


@dataclass(frozen=True, slots=True)
class Done:
    """A finished command: exit code, stderr lines (blank ones dropped) and seconds taken."""

    code: int
    lines: list[str]
    stdout: str
    seconds: float

    @property
    def stderr(self) -> str:
        """All of stderr."""
        return "\n".join(self.lines)


def corral(
    cwd: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> Done:
    """Run `python -m corral ARGS` in `cwd` until it exits."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "corral", *args],
        cwd=cwd,
        env=user_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return Done(done.returncode, lines, done.stdout, time.monotonic() - start)


def assert_one_line_error(done: Done, *needles: str) -> str:
    """The command failed without a traceback; its last stderr line is the error and holds
    every needle; no other line is an error. Returns that line."""
    assert done.code != 0, done.stderr
    assert "Traceback" not in done.stderr and "PoolTimeout" not in done.stderr, done.stderr
    last = done.lines[-1]
    assert last.startswith("error: "), done.stderr
    for needle in needles:
        assert needle in last, done.stderr
    errors = [line for line in done.lines if _is_error(line)]
    assert errors == [last], done.stderr
    return last


def _is_error(line: str) -> bool:
    """An error line: ours, a log record at ERROR or above (JSON), or a libraries' warning."""
    return line.startswith("error") or any(
        f'"level": "{level}"' in line for level in ("error", "critical")
    )


@dataclass
class Started:
    """A `corral serve`/`worker` child whose stderr goes to a file."""

    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        """Its stderr so far."""
        return self.log.read_text()

    def wait_for(self, needle: str, timeout: float = 120) -> str:
        """Stderr once it holds `needle` (fails if the process exits first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text:
                return text
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{text}"
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} not logged in {timeout} s:\n{self.text()}")


@contextmanager
def started(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> Iterator[Started]:
    """`python -m corral ARGS` in `cwd`, stopped (SIGTERM, then SIGKILL) afterwards."""
    log = cwd / f"stderr-{time.monotonic_ns()}.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "corral", *args],
            cwd=cwd,
            env=user_env(env),
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
    try:
        yield Started(proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def healthy(url: str) -> bool:
    """One GET /health, no retry."""
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
