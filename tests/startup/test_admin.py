"""Admin commands read the data dir a server made; run from another folder they refuse,
naming the data dir they looked for, and create nothing (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.startup.support import assert_one_line_error, corral

COMMANDS = [
    ("status",),
    ("migrate",),
    ("env-key", "list", "env_x"),
    ("env-key", "create", "env_x"),
    ("vault-rekey",),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
def test_refused_where_there_is_no_data_dir(tmp_path: Path, command: tuple[str, ...]) -> None:
    done = corral(tmp_path, *command)
    assert done.code == 2
    assert_one_line_error(done, f"no Corral data dir at {tmp_path / '.corral'}", "--data-dir")
    assert len(done.lines) == 1, done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS[:1] + COMMANDS[2:], ids=lambda c: "-".join(c))
def test_refused_on_a_data_dir_without_a_database(tmp_path: Path, command: tuple[str, ...]) -> None:
    (tmp_path / "elsewhere").mkdir()
    done = corral(tmp_path, *command, "--data-dir", "elsewhere")
    assert_one_line_error(done, f"no Corral database at {tmp_path / 'elsewhere' / 'corral.db'}")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_migrate_create_database_makes_the_sqlite_data_dir(tmp_path: Path) -> None:
    done = corral(tmp_path, "migrate", "--create-database")
    assert done.code == 0, done.stderr
    assert (tmp_path / ".corral" / "corral.db").is_file()
    status = corral(tmp_path, "status")
    assert status.code == 0 and "pending=0" in status.stderr, status.stderr


def test_vault_rekey_never_makes_a_key(tmp_path: Path) -> None:
    assert corral(tmp_path, "migrate", "--create-database").code == 0
    done = corral(tmp_path, "vault-rekey")
    assert_one_line_error(done, "CORRAL_VAULT_KEY", str(tmp_path / ".corral" / "vault.key"))
    assert not (tmp_path / ".corral" / "vault.key").exists()
