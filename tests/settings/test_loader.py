"""The settings loader: sources, precedence, paths and the one-line errors it raises."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from corral.config import load_settings

VAULT_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()


def load_file(tmp_path: Path, toml: str, env: dict[str, str] | None = None) -> object:
    path = tmp_path / "corral.toml"
    path.write_text(toml)
    return load_settings(environ=env or {}, config_file=path)


def refused(tmp_path: Path, toml: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ValueError) as info:
        load_file(tmp_path, toml, env)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("toml", "named", "nearest"),
    [
        ("[sevrer]\nport = 9000\n", "[sevrer]", "did you mean [server]?"),
        ("[server]\nprot = 8080\n", "'prot' in [server]", "did you mean [server] port?"),
        ("port = 8080\n", "'port' outside any section", "did you mean [server] port?"),
        ("[egress]\nmax_conections = 3\n", "'max_conections'", "[egress] max_connections?"),
        ("[metrics]\npublik = true\n", "'publik' in [metrics]", "did you mean [metrics] public?"),
        ("[models]\nroute = []\n", "'route' in [models]", "did you mean [[models.routes]]?"),
        ('[skills.antropic]\nx = "/y"\n', "[skills.antropic]", "[skills.anthropic]?"),
        ("[tracing]\nendpiont = 'http://x'\n", "'endpiont'", "[tracing] endpoint?"),
    ],
)
def test_unknown_keys_and_sections_name_the_key_file_and_nearest(
    tmp_path: Path, toml: str, named: str, nearest: str
) -> None:
    message = refused(tmp_path, toml)
    assert message.startswith("unknown ")
    assert named in message and nearest in message and str(tmp_path / "corral.toml") in message


@pytest.mark.parametrize(
    ("toml", "env", "expected"),
    [
        ('[server]\nport = "abc"\n', {}, "[server] port should be a valid integer"),
        ("[server]\nworkers = 1.5\n", {}, "[server] workers should be a valid integer"),
        ("[server]\nlease_seconds = 0\n", {}, "[server] lease_seconds must be positive"),
        ('[server]\nhost = ["a"]\n', {}, "[server] host should be a valid string"),
        ("[server]\nworkers = true\n", {}, "[server] workers must not be true or false"),
        ("[metrics]\nport = true\n", {}, "[metrics] port must not be true or false"),
        ("[server]\ndata_dir = 5\n", {}, "[server] data_dir is not a valid path, got 5"),
        ("", {"CORRAL_WORKERS": "abc"}, "CORRAL_WORKERS should be a valid integer"),
        ("", {"CORRAL_PORT": "99999"}, "CORRAL_PORT must be a port number"),
        ("", {"CORRAL_LEASE_SECONDS": "soon"}, "CORRAL_LEASE_SECONDS should be a valid number"),
        ("", {"CORRAL_EAGER_SANDBOXES": "yes"}, "CORRAL_EAGER_SANDBOXES must be true or false"),
        ("", {"CORRAL_LOG_LEVEL": "LOUD"}, "CORRAL_LOG_LEVEL must be one of DEBUG, INFO"),
        ("", {"CORRAL_VAULT_KEY": "not-a-key"}, "CORRAL_VAULT_KEY entry 1: vault key"),
        ("", {"CORRAL_VAULT_KEY": f"{VAULT_KEY},short"}, "CORRAL_VAULT_KEY entry 2"),
        ('[server]\nlog_level = "chatty"\n', {}, "[server] log_level must be one of"),
        ("", {"CORRAL_MODEL_ROUTES": "[{"}, "CORRAL_MODEL_ROUTES must hold JSON"),
    ],
)
def test_a_bad_value_names_its_key_and_where_it_came_from(
    tmp_path: Path, toml: str, env: dict[str, str], expected: str
) -> None:
    message = refused(tmp_path, toml, env)
    assert message.startswith(expected), message
    if not env:
        assert message.endswith(f"(in {tmp_path / 'corral.toml'})")


def test_secret_values_are_never_echoed(tmp_path: Path) -> None:
    message = refused(tmp_path, "", {"CORRAL_VAULT_KEY": "hunter2-secret"})
    assert "hunter2" not in message
    message = refused(tmp_path, "[server]\ndatabase_url = 'mysql://u:hunter2@h/db'\n")
    assert "hunter2" not in message and "'mysql'" in message


@pytest.mark.parametrize(
    "url", ["mysql://x@h/db", "postgresql+psycopg://h/db", "sqlite://relative.db", "http://h/db"]
)
def test_a_database_url_of_another_scheme_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValueError, match="database-url .*scheme|database-url must look like"):
        load_settings({"database_url": url}, environ={}, config_file=tmp_path / "none.toml")


def test_database_urls_that_work_keep_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    none = tmp_path / "none.toml"

    def url(value: str) -> str | None:
        return load_settings({"database_url": value}, environ={}, config_file=none).database_url

    pg = "postgresql://corral:pw@db.internal:5432/corral"
    assert url(pg) == pg and url("postgres://h/db") == "postgres://h/db"
    assert url("sqlite:///rel/c.db") == f"sqlite:///{tmp_path}/rel/c.db"
    assert url("sqlite:////abs/c.db") == "sqlite:////abs/c.db"
    assert url("store.db") == str(tmp_path / "store.db")
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "corral.toml").write_text('[server]\ndatabase_url = "sqlite:///db/c.db"\n')
    from_file = load_settings(environ={}, config_file=conf / "corral.toml").database_url
    assert from_file == f"sqlite:///{conf}/db/c.db"


def test_a_named_config_file_must_exist_the_default_need_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_settings(environ={}).port == 8080  # no ./corral.toml: defaults
    with pytest.raises(ValueError, match=r"config file .*missing.toml \(named by CORRAL_CONFIG\)"):
        load_settings(environ={"CORRAL_CONFIG": "missing.toml"})


def test_a_toml_syntax_error_is_one_line_naming_the_file(tmp_path: Path) -> None:
    message = refused(tmp_path, "[server\nport = 1\n")
    assert message.startswith(f"{tmp_path / 'corral.toml'}: not valid TOML: ")
    assert "line 1" in message


def test_unknown_corral_variables_warn_with_the_nearest_but_do_not_fail(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"CORRAL_WROKERS": "3", "CORRAL_DATABASE": "x", "PATH": "/bin"}
    settings = load_settings(environ=env, config_file=tmp_path / "none.toml")
    assert settings.workers == 256
    lines = [r.getMessage() for r in caplog.records if r.name == "corral.config"]
    assert "unknown environment variable CORRAL_WROKERS (did you mean CORRAL_WORKERS?)" in (
        " ".join(lines)
    )
    assert any("CORRAL_DATABASE (did you mean CORRAL_DATABASE_URL?)" in x for x in lines)
    assert len(lines) == 2


def test_relative_paths_are_made_absolute_once_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    none = tmp_path / "none.toml"
    assert load_settings(environ={}, config_file=none).data_dir == work / ".corral"
    from_env = load_settings(environ={"CORRAL_DATA_DIR": "d"}, config_file=none).data_dir
    assert from_env == work / "d"
    assert load_settings({"data_dir": Path("../f")}, environ={}).data_dir == tmp_path / "f"
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "corral.toml").write_text('[server]\ndata_dir = "state"\nbwrap = "bin/bwrap"\n')
    settings = load_settings(environ={"CORRAL_CONFIG": str(conf / "corral.toml")})
    assert settings.data_dir == conf / "state"  # relative to the file, not to the cwd
    assert settings.bwrap == str(conf / "bin" / "bwrap")
    assert load_settings(environ={}, config_file=none).bwrap == "bwrap"  # looked up on PATH


def test_precedence_flags_then_environment_then_file_then_defaults(tmp_path: Path) -> None:
    path = tmp_path / "corral.toml"
    path.write_text("[server]\nport = 9000\nworkers = 8\nlease_seconds = 4\n")
    env = {"CORRAL_WORKERS": "5", "CORRAL_LEASE_SECONDS": "3"}
    settings = load_settings({"lease_seconds": 2.0, "port": None}, environ=env, config_file=path)
    assert (settings.port, settings.workers, settings.lease_seconds) == (9000, 5, 2.0)
    assert settings.source("port") == f"file {path}"
    assert settings.source("workers") == "env CORRAL_WORKERS"
    assert settings.source("lease_seconds") == "flag --lease-seconds"
    assert settings.source("host") == "default"


ROUTE = '{"match": "llama*", "provider": "openai", "base_url": "http://127.0.0.1:9/v1"}'


@pytest.mark.parametrize(
    ("name", "toml", "env", "expected"),
    [
        ("host", '[server]\nhost = "0.0.0.0"', {"CORRAL_HOST": "0.0.0.0"}, "0.0.0.0"),
        ("port", "[server]\nport = 9001", {"CORRAL_PORT": "9001"}, 9001),
        ("bwrap", '[server]\nbwrap = "bw"', {"CORRAL_BWRAP": "bw"}, "bw"),
        ("sse_ping_seconds", "[server]\nsse_ping_seconds = 2", {"CORRAL_SSE_PING_SECONDS": "2"}, 2),
        ("max_file_bytes", "[server]\nmax_file_bytes = 10", {"CORRAL_MAX_FILE_BYTES": "10"}, 10),
        (
            "sandbox_idle_seconds",
            "[server]\nsandbox_idle_seconds = 5",
            {"CORRAL_SANDBOX_IDLE_SECONDS": "5"},
            5.0,
        ),
        (
            "sandbox_disk_bytes",
            "[server]\nsandbox_disk_bytes = 7",
            {"CORRAL_SANDBOX_DISK_BYTES": "7"},
            7,
        ),
        ("api_keys", '[server]\napi_keys = ["a", "b"]', {"CORRAL_API_KEYS": "a, b"}, ("a", "b")),
        ("eager_sandboxes", "[server]\neager_sandboxes = true", {"CORRAL_EAGER_SANDBOXES": "1"}, 1),
        ("vault_key", f'[server]\nvault_key = "{VAULT_KEY}"', {"CORRAL_VAULT_KEY": VAULT_KEY}, 0),
        ("log_level", '[server]\nlog_level = "debug"', {"CORRAL_LOG_LEVEL": "debug"}, "DEBUG"),
        (
            "environment_key",
            '[hands]\nenvironment_key = "ek"',
            {"CORRAL_ENVIRONMENT_KEY": "ek"},
            "ek",
        ),
        (
            "tracing_endpoint",
            '[tracing]\nendpoint = "http://otel:4318"',
            {"CORRAL_TRACING_ENDPOINT": "http://otel:4318"},
            "http://otel:4318/v1/traces",
        ),
        (
            "tracing_service_name",
            '[tracing]\nservice_name = "c2"',
            {"CORRAL_TRACING_SERVICE_NAME": "c2"},
            "c2",
        ),
        (
            "model_routes",
            "[[models.routes]]\nmatch = 'llama*'\nprovider = 'openai'\n"
            "base_url = 'http://127.0.0.1:9/v1'",
            {"CORRAL_MODEL_ROUTES": f"[{ROUTE}]"},
            "llama*",
        ),
    ],
)
def test_every_setting_is_read_from_both_the_file_and_the_environment(
    tmp_path: Path, name: str, toml: str, env: dict[str, str], expected: object
) -> None:
    path = tmp_path / "corral.toml"
    path.write_text(toml + "\n")
    none = tmp_path / "none.toml"
    values = [
        getattr(load_settings(environ={}, config_file=path), name),
        getattr(load_settings(environ=env, config_file=none), name),
    ]
    if name == "vault_key":
        expected = VAULT_KEY
    if name == "model_routes":
        values = [routes[0].match for routes in values]
    assert values == [expected, expected]
