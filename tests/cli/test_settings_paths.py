"""Path settings are absolute once loaded, whichever source gave them relative: nothing after
the load may resolve them against another working directory (sandboxes start from `/`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.config import load_settings


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory of the command under test."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_default_data_dir_is_the_working_directorys(here: Path) -> None:
    settings = load_settings(environ={})
    assert settings.data_dir == here / ".corral"
    assert settings.sqlite_path == here / ".corral" / "corral.db"


def test_relative_paths_from_the_config_file_are_made_absolute(here: Path) -> None:
    (here / "corral.toml").write_text(
        '[server]\ndata_dir = "state/../data"\ndatabase_url = "sqlite:///db/corral.db"\n'
        'bwrap = "bin/bwrap"\n'
    )
    settings = load_settings(environ={})
    assert settings.data_dir == here / "data"
    assert settings.database_url == f"sqlite:///{here}/db/corral.db"
    assert settings.bwrap == f"{here}/bin/bwrap"


def test_relative_paths_from_the_environment_and_flags_are_made_absolute(here: Path) -> None:
    (here / "conf").mkdir()
    (here / "conf" / "empty.toml").write_text("")
    environ = {"CORRAL_DATA_DIR": "from-env", "CORRAL_CONFIG": "conf/empty.toml"}
    assert load_settings(environ=environ).data_dir == here / "from-env"
    flagged = load_settings({"data_dir": Path("from-flag")}, environ=environ)
    assert flagged.data_dir == here / "from-flag"


def test_home_and_absolute_paths_and_bare_commands_are_kept(
    here: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(here / "home"))
    settings = load_settings(
        {"database_url": "sqlite:////srv/corral.db", "data_dir": Path("~/corral")}, environ={}
    )
    assert settings.data_dir == here / "home" / "corral"
    assert settings.database_url == "sqlite:////srv/corral.db"
    assert settings.bwrap == "bwrap"  # looked up on PATH, not in the working directory
