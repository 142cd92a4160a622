"""A real Corral server in a child process on a loopback port, for SDK-level tests.

Crash tests SIGKILL it and start it again on the same data directory.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anthropic
import httpx
import psycopg
import pytest
from psycopg import sql

API_KEY = "test-key"
DATABASE_URL_ENV = "CORRAL_TEST_DATABASE_URL"


@contextmanager
def fresh_postgres(prefix: str = "corral_api") -> Iterator[str]:
    """A new database on the CI PostgreSQL server (URL form), dropped afterwards."""
    base = os.environ[DATABASE_URL_ENV]
    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        parts = urlsplit(base)
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def short_lease_server(
    data_dir: Path, model_url: str, backend: str, lease_seconds: float
) -> Iterator[ServerProcess]:
    """A started server on `backend` whose leases last `lease_seconds` (crash tests: a
    restarted process on PostgreSQL must wait out the dead one's lease); stopped after."""
    with backend_env(backend) as env:
        lease = {"CORRAL_LEASE_SECONDS": str(lease_seconds)}
        proc = ServerProcess(data_dir, model_url=model_url, env={**env, **lease})
        proc.start()
        try:
            yield proc
        finally:
            proc.stop()


@contextmanager
def backend_env(backend: str) -> Iterator[dict[str, str]]:
    """Environment selecting the store: embedded SQLite, or a fresh PostgreSQL database."""
    if backend == "sqlite":
        yield {}
        return
    if not os.environ.get(DATABASE_URL_ENV):
        pytest.skip(f"{DATABASE_URL_ENV} is not set")
    with fresh_postgres() as url:
        yield {"CORRAL_DATABASE_URL": url}


def free_port() -> int:
    """An unused loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """`corral serve` in a subprocess."""

    def __init__(
        self,
        data_dir: Path,
        *,
        model_url: str | None = None,
        env: Mapping[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.model_url = model_url
        self.extra_env = dict(env or {})
        self.args = args
        self.python_args: tuple[str, ...] = ()
        """Interpreter options before `-m corral` (benchmarks profile the server this way)."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "server.log"

    @property
    def url(self) -> str:
        """Base URL for the SDK."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        """Start and wait until /health answers."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        env.update(
            {
                "CORRAL_API_KEYS": API_KEY,
                "ANTHROPIC_API_KEY": "sk-test-secret",
                "CORRAL_CONFIG": str(self.data_dir / "corral.toml"),
            }
        )
        if self.model_url:
            env["ANTHROPIC_BASE_URL"] = self.model_url
        env.update(self.extra_env)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "corral.toml").touch()  # a config file named must exist
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    *self.python_args,
                    "-m",
                    "corral",
                    "serve",
                    "--port",
                    str(self.port),
                    "--data-dir",
                    str(self.data_dir),
                    *self.args,
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + 180  # a loaded 2-core box can take 45 s to import
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become healthy")

    def kill(self) -> None:
        """SIGKILL the whole process group (no cleanup runs)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def restart(self) -> ServerProcess:
        """Kill -9, then start again on the same data dir and port."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        """Graceful stop (SIGTERM), then kill if needed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def client(self, **kwargs: object) -> anthropic.Anthropic:
        """The official SDK pointed at this server."""
        return anthropic.Anthropic(base_url=self.url, api_key=API_KEY, max_retries=0, **kwargs)  # type: ignore[arg-type]


def start_worker(
    data_dir: Path,
    database_url: str,
    model_url: str,
    env: Mapping[str, str] | None = None,
    args: tuple[str, ...] = (),
    log_name: str = "worker.log",
) -> subprocess.Popen[bytes]:
    """A separate `corral worker` process (the scale-out deployment's brains and hands) on
    `database_url`, sharing `data_dir` with an API-only server; logs to data_dir/log_name.

    Its own process group, so a test can SIGKILL it whole (no cleanup runs)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CORRAL_"))}
    child_env.update(
        {
            "CORRAL_API_KEYS": API_KEY,
            "ANTHROPIC_API_KEY": "sk-test-secret",
            "ANTHROPIC_BASE_URL": model_url,
            "CORRAL_CONFIG": str(data_dir / "corral.toml"),
            **(env or {}),
        }
    )
    (data_dir / "corral.toml").touch()  # a config file named must exist
    command = [sys.executable, "-m", "corral", "worker", "--database-url", database_url]
    command += ["--data-dir", str(data_dir), "--workers", "4", *args]
    with (data_dir / log_name).open("ab") as log:
        return subprocess.Popen(
            command, env=child_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it does not go within 10 s."""
    if worker.poll() is not None:
        return
    worker.terminate()
    try:
        worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
