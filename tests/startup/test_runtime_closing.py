"""The composition root closes what it opened when wiring fails half-way (issue 20): a vault
key refused after the store opened used to be the only path that closed the store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.config import load_settings
from corral.errors import StartupError
from corral.runtime import open_runtime
from corral.vault.crypto import encode_key, new_key
from tests.startup.test_vault_key import _seal_credential

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def open_database_files(path: Path) -> list[str]:
    """This process's open descriptors on `path` (and its -wal / -shm files)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


async def test_a_refused_start_leaves_no_database_open(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await _seal_credential(data_dir, encode_key(new_key()))
    settings = load_settings(
        environ={"CORRAL_DATA_DIR": str(data_dir), "CORRAL_VAULT_KEY": encode_key(new_key())}
    )
    with pytest.raises(StartupError):
        async with open_runtime(settings):
            pytest.fail("a wrong vault key must refuse the start")
    assert open_database_files(data_dir / "corral.db") == []


async def test_a_clean_exit_closes_everything(tmp_path: Path) -> None:
    settings = load_settings(environ={"CORRAL_DATA_DIR": str(tmp_path / "data")})
    async with open_runtime(settings) as runtime:
        assert open_database_files(tmp_path / "data" / "corral.db")
        assert runtime.store is not None
    assert open_database_files(tmp_path / "data" / "corral.db") == []
