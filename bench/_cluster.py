"""A scale-out Corral deployment on one machine for chaos runs and benchmarks: a fresh
PostgreSQL database, API processes (`corral serve --workers 0`) and brain workers
(`corral worker`), all on ONE shared data dir (sandbox workspaces live there).

Only starts, signals and stops processes it made; never touches another database.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import _util
import psycopg
from psycopg import sql
from tests.server import API_KEY, ServerProcess

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
WORKER_CODE = """
import logging
logging.basicConfig(level=logging.WARNING,
                    format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
logging.getLogger("corral.brain").setLevel(logging.INFO)
from corral.cli import main
main()
"""
"""`corral worker` with the brain's INFO lines (LeaseLost rejections) visible in its log."""
UNFENCED_PATCH = """
import corral.store.postgres as _pg
_fenced_init = _pg.PostgresStore.__init__
def _unfenced_init(self, *args, **kwargs):
    kwargs["fencing"] = False
    _fenced_init(self, *args, **kwargs)
_pg.PostgresStore.__init__ = _unfenced_init
"""
"""Prepended to WORKER_CODE for the chaos run's negative control only: production code has no
switch that turns fencing off, so the test harness patches it in its own child processes."""


@contextlib.contextmanager
def fresh_database(admin_url: str, prefix: str) -> Iterator[str]:
    """Create `<prefix>_<hex>` on the server of `admin_url` (a postgresql:// URL), yield the
    new database's URL, drop it afterwards."""
    name = f"{prefix}_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def write_config(data_dir: Path, *, lease_seconds: float, sandbox_idle_seconds: float) -> Path:
    """The `corral.toml` every process of the cluster reads (CORRAL_CONFIG)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "corral.toml"
    lines = [
        "[server]",
        f"lease_seconds = {lease_seconds}",
        f"sandbox_idle_seconds = {sandbox_idle_seconds}",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def child_env(data_dir: Path, model_url: str, extra: dict[str, str]) -> dict[str, str]:
    """Environment for a cluster process: fake model, shared key, byte-code cache.

    The cache matters: workers are restarted about every second and without it each restart
    recompiles every module (PYTHONDONTWRITEBYTECODE is set on some CI images).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(
        {
            "CORRAL_API_KEYS": API_KEY,
            "ANTHROPIC_API_KEY": "sk-test-secret",
            "ANTHROPIC_BASE_URL": model_url,
            "CORRAL_CONFIG": str(data_dir / "corral.toml"),
            "PYTHONDONTWRITEBYTECODE": "",
            "PYTHONPYCACHEPREFIX": str(_util.ROOT / ".bench-tmp" / "pycache"),
        }
    )
    env.update(extra)
    return env


class WorkerProcess:
    """One `corral worker` slot: started, SIGKILLed, paused and restarted many times."""

    def __init__(
        self,
        index: int,
        data_dir: Path,
        database_url: str,
        env: dict[str, str],
        slots: int,
        *,
        fencing: bool = True,
    ) -> None:
        self.index = index
        self.code = WORKER_CODE if fencing else UNFENCED_PATCH + WORKER_CODE
        self.data_dir = data_dir
        self.database_url = database_url
        self.env = env
        self.slots = slots
        self.log_path = data_dir.parent / "logs" / f"worker-{index}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.paused = False
        self.starts = 0

    @property
    def pid(self) -> int | None:
        """Pid of the running incarnation."""
        return self.proc.pid if self.proc is not None else None

    def age(self) -> float:
        """Seconds since this incarnation was spawned."""
        return time.monotonic() - self.started_at

    def start(self) -> WorkerProcess:
        """Spawn a new incarnation (does not wait: a worker has no health endpoint)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-c", self.code, "worker", "--database-url", self.database_url]
        args += ["--data-dir", str(self.data_dir), "--workers", str(self.slots)]
        with self.log_path.open("ab") as log:
            log.write(f"---- start #{self.starts} at {time.time():.3f}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started_at = time.monotonic()
        self.paused = False
        self.starts += 1
        return self

    def kill(self) -> None:
        """SIGKILL the process group (worker and its sandboxes); no cleanup runs."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP the worker only: its sandboxes keep running, its leases run out."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT: the brain wakes up with stale leases (what fencing protects against)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period."""
        if self.proc is not None and self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None


class Cluster:
    """API processes and worker slots on one database and one data dir."""

    def __init__(
        self,
        root: Path,
        database_url: str,
        model_url: str,
        *,
        worker_env: dict[str, str] | None = None,
        worker_slots: int = 64,
        fencing: bool = True,
    ) -> None:
        self.fencing = fencing
        self.root = root
        self.data_dir = root / "data"
        self.database_url = database_url
        self.model_url = model_url
        self.api_env = child_env(self.data_dir, model_url, {})
        self.worker_env = child_env(self.data_dir, model_url, worker_env or {})
        self.worker_slots = worker_slots
        self.apis: list[ServerProcess] = []
        self.workers: list[WorkerProcess] = []

    def start_apis(self, count: int, *, brain_slots: int = 0) -> None:
        """`corral serve --workers <brain_slots>` processes; waits until each is healthy."""
        for index in range(count):
            api = ServerProcess(
                self.data_dir,
                model_url=self.model_url,
                env=self.api_env,
                args=("--database-url", self.database_url, "--workers", str(brain_slots)),
            )
            api.log_path = self.root / "logs" / f"api-{index}.log"
            api.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.apis.append(api.start())

    def start_workers(self, count: int) -> None:
        """`corral worker` processes (not waited for)."""
        for index in range(count):
            worker = WorkerProcess(
                index,
                self.data_dir,
                self.database_url,
                self.worker_env,
                self.worker_slots,
                fencing=self.fencing,
            )
            self.workers.append(worker.start())

    def stop_workers(self) -> None:
        """Stop every worker (a worker's leases then expire or are released)."""
        for worker in self.workers:
            worker.stop()

    def stop(self) -> None:
        """Stop workers, then API processes."""
        self.stop_workers()
        for api in self.apis:
            api.stop()

    def worker_logs(self) -> list[Path]:
        """Every worker slot's log (all incarnations appended)."""
        return [w.log_path for w in self.workers if w.log_path.exists()]
