"""`corral config check|show` and every command's handling of bad configuration, run as a
user would: `python -m corral` in a working directory holding a corral.toml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

VAULT_KEY = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"


def corral(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    # the test run's own CORRAL_* variables (a test database URL, a uid range) stay out
    base = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    return subprocess.run(
        [sys.executable, "-m", "corral", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("configuration error: ")
    return lines[0]


BAD = [
    ("[sevrer]\nport = 9000\n", {}, "unknown section [sevrer]"),
    ("[server]\nprot = 8080\n", {}, "did you mean [server] port?"),
    ('[server]\nport = "abc"\n', {}, "[server] port should be a valid integer"),
    ("[server\n", {}, "not valid TOML"),
    ("", {"CORRAL_WORKERS": "abc"}, "CORRAL_WORKERS should be a valid integer"),
    ("", {"CORRAL_VAULT_KEY": "bad"}, "CORRAL_VAULT_KEY entry 1"),
    ("", {"CORRAL_LOG_LEVEL": "LOUD"}, "CORRAL_LOG_LEVEL must be one of"),
    ("", {"CORRAL_CONFIG": "elsewhere.toml"}, "(named by CORRAL_CONFIG) does not exist"),
    ('[web_search]\nprovider = "bing"\n', {}, "[web_search] provider: must be one of"),
]


@pytest.mark.parametrize(("toml", "env", "expected"), BAD)
def test_config_check_names_the_problem_in_one_line(
    tmp_path: Path, toml: str, env: dict[str, str], expected: str
) -> None:
    (tmp_path / "corral.toml").write_text(toml)
    assert expected in one_line_error(corral(tmp_path, "config", "check", env=env))


@pytest.mark.parametrize(("toml", "env", "expected"), BAD[:1] + BAD[4:7])
def test_serve_refuses_bad_configuration_before_starting(
    tmp_path: Path, toml: str, env: dict[str, str], expected: str
) -> None:
    (tmp_path / "corral.toml").write_text(toml)
    result = corral(tmp_path, "serve", "--port", "1", env=env, timeout=30)
    assert expected in one_line_error(result)


def test_serve_refuses_a_database_url_it_cannot_use(tmp_path: Path) -> None:
    result = corral(tmp_path, "serve", "--port", "1", "--database-url", "mysql://x@h/db")
    assert "--database-url has scheme 'mysql'" in one_line_error(result)
    assert not (tmp_path / "mysql:").exists()


@pytest.mark.parametrize("command", [["env-key", "list", "env_x"], ["status"], ["migrate"]])
def test_admin_commands_validate_the_file_too(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "corral.toml").write_text("[server]\ndata_dir = 'd'\n[sevrer]\n")
    assert "[sevrer]" in one_line_error(corral(tmp_path, *command))
    assert not (tmp_path / "d").exists()


def test_config_check_ok_and_its_config_flag(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text("[server]\nport = 9000\n")
    result = corral(tmp_path, "config", "check", "--config", "mine.toml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"configuration OK ({tmp_path / 'mine.toml'}: 1 set")
    missing = corral(tmp_path, "config", "check", "--config", "nope.toml")
    assert "(named by --config) does not exist" in one_line_error(missing)


def test_config_check_warns_of_unknown_variables_but_passes(tmp_path: Path) -> None:
    result = corral(tmp_path, "config", "check", env={"CORRAL_WROKERS": "2"})
    assert result.returncode == 0
    assert "CORRAL_WROKERS (did you mean CORRAL_WORKERS?)" in result.stderr


def test_config_show_prints_values_sources_and_redacts_secrets(tmp_path: Path) -> None:
    (tmp_path / "corral.toml").write_text(
        "[server]\nport = 9000\ndata_dir = 'state'\n"
        "database_url = 'postgresql://corral:pg-secret@db/corral?sslpassword=ssl-secret'\n"
    )
    env = {
        "CORRAL_API_KEYS": "crl_key-one,crl_key-two",
        "CORRAL_VAULT_KEY": VAULT_KEY,
        "CORRAL_ENVIRONMENT_KEY": "ek-secret",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:otel-secret@otel.example?token=tok-secret",
        "CORRAL_WORKERS": "3",
    }
    result = corral(tmp_path, "config", "show", env=env)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for secret in ("pg-secret", "ssl-secret", "key-one", VAULT_KEY, "ek-secret", "otel-secret"):
        assert secret not in out
    assert "tok-secret" not in out
    rows = {" ".join(line.split()[:2]): line for line in out.splitlines() if line.startswith("[")}
    config = tmp_path / "corral.toml"
    assert "9000" in rows["[server] port"] and rows["[server] port"].endswith(f"# file {config}")
    assert f'"{tmp_path}/state"' in rows["[server] data_dir"]
    assert "postgresql://corral:***@db/corral" in rows["[server] database_url"]
    assert "*** (2 given)" in rows["[server] api_keys"] and rows["[server] api_keys"].endswith(
        "env CORRAL_API_KEYS"
    )
    assert rows["[server] workers"].endswith("# env CORRAL_WORKERS")
    assert rows["[server] host"].endswith("# default")
    assert rows["[tracing] endpoint"].endswith("# env OTEL_EXPORTER_OTLP_ENDPOINT")
