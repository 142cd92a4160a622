"""A build older than its data refuses to start: one line naming the database's schema version
and the newest this build knows, with what to do; exit code 2, no traceback, nothing changed.

The data is made "newer" the way a newer release leaves it: a migrated database whose
`schema_version` holds a version past this build's last migration.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from corral.store.schema import scripts
from corral.store.sqlite_db import schema_version
from tests.server import API_KEY, DATABASE_URL_ENV, free_port, fresh_postgres

FUTURE = 999


def corral(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "CORRAL_"))}
    env |= {"CORRAL_API_KEYS": API_KEY, "ANTHROPIC_API_KEY": "sk-test-secret"}
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def assert_refused(result: subprocess.CompletedProcess[str], backend: str) -> None:
    supported = max(version for version, _ in scripts(backend))
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if f"schema version {FUTURE}" in line]
    assert len(lines) == 1, output
    assert f"the {supported} this Corral" in lines[0]
    assert "docs/operations.md" in lines[0]


def test_sqlite_data_from_a_newer_build_stops_status_migrate_and_serve(tmp_path: Path) -> None:
    db = tmp_path / "data" / "corral.db"
    db.parent.mkdir()
    schema_version(db)  # migrated by this build
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO schema_version VALUES (?)", (FUTURE,))
    # relative paths, as an operator types them
    assert_refused(corral(tmp_path, "status", "--data-dir", "data"), "sqlite")
    assert_refused(corral(tmp_path, "migrate", "--data-dir", "data"), "sqlite")
    port = str(free_port())
    assert_refused(corral(tmp_path, "serve", "--data-dir", "data", "--port", port), "sqlite")
    with sqlite3.connect(db) as conn:
        versions = [row[0] for row in conn.execute("SELECT version FROM schema_version")]
    assert max(versions) == FUTURE and len(versions) == len(set(versions))  # nothing applied


@pytest.mark.skipif(not os.environ.get(DATABASE_URL_ENV), reason=f"{DATABASE_URL_ENV} not set")
def test_postgres_data_from_a_newer_build_stops_status_serve_and_worker(tmp_path: Path) -> None:
    with fresh_postgres("corral_downgrade") as url:
        migrated = corral(tmp_path, "migrate", "--database-url", url, "--data-dir", "data")
        assert migrated.returncode == 0, migrated.stderr
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (FUTURE,))
        status = corral(tmp_path, "status", "--database-url", url, "--data-dir", "data")
        assert_refused(status, "postgres")
        port = str(free_port())
        assert_refused(
            corral(tmp_path, "serve", "--database-url", url, "--data-dir", "data", "--port", port),
            "postgres",
        )
        assert_refused(
            corral(tmp_path, "worker", "--database-url", url, "--data-dir", "data"), "postgres"
        )
