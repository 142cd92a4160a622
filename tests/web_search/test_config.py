"""`[web_search]` in corral.toml and `CORRAL_WEB_SEARCH_*`: parsed, merged and validated at load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.config import load_settings
from corral.web_search_config import parse_web_search


def load(tmp_path: Path, toml: str, env: dict[str, str] | None = None) -> Any:
    path = tmp_path / "corral.toml"
    path.write_text(toml)
    return load_settings(environ=env or {}, config_file=path)


def test_searxng_from_toml(tmp_path: Path) -> None:
    settings = load(
        tmp_path,
        '[web_search]\nprovider = "searxng"\nurl = "https://searx.example.org/"\nmax_uses = 3\n',
    )
    config = settings.web_search
    assert config.provider == "searxng" and config.url == "https://searx.example.org"
    assert config.max_uses == 3 and config.max_results == 10 and config.api_key is None


def test_no_section_means_no_provider(tmp_path: Path) -> None:
    assert load(tmp_path, "[server]\nport = 9000\n").web_search is None


def test_hosted_provider_reads_its_key_from_the_named_variable(tmp_path: Path) -> None:
    toml = '[web_search]\nprovider = "brave"\napi_key_env = "BRAVE_KEY"\n'
    settings = load(tmp_path, toml, {"BRAVE_KEY": "brv-secret-123"})
    config = settings.web_search
    assert config.url == "https://api.search.brave.com" and config.api_key == "brv-secret-123"
    assert "brv-secret-123" not in repr(config)


def test_missing_key_variable_is_named_at_load(tmp_path: Path) -> None:
    toml = '[web_search]\nprovider = "tavily"\napi_key_env = "TAVILY_KEY"\n'
    with pytest.raises(ValueError, match=r"\[web_search\] api_key_env: .*TAVILY_KEY is not set"):
        load(tmp_path, toml)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('provider = "bing"', r"\[web_search\] provider: must be one of"),
        ('provider = "searxng"', r"\[web_search\] url: required for provider 'searxng'"),
        ('provider = "searxng"\nurl = "searx.example.org"', r"url: must be an http"),
        ('provider = "brave"', r"\[web_search\] api_key_env: required for provider 'brave'"),
        ('url = "https://searx.example.org"', r"\[web_search\] provider: required"),
        ('provider = "searxng"\nurl = "http://x"\nmax_uses = 0', r"max_uses: must be an integer"),
        ('provider = "searxng"\nurl = "http://x"\ntimeout_seconds = -1', r"timeout_seconds"),
        ('provider = "searxng"\nurl = "http://x"\nkey = "k"', r"unknown keys \['key'\]"),
    ],
)
def test_bad_tables_are_refused_naming_the_setting(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load(tmp_path, "[web_search]\n" + toml + "\n")


def test_a_key_pasted_as_the_variable_name_is_not_echoed() -> None:
    table = {"provider": "brave", "api_key_env": "BSA-abc.def-secret"}
    with pytest.raises(ValueError) as info:
        parse_web_search(table, {})
    assert "BSA-abc.def-secret" not in str(info.value)
    assert "NAME of an environment variable" in str(info.value)


def test_environment_overrides_the_file_key_by_key(tmp_path: Path) -> None:
    toml = '[web_search]\nprovider = "searxng"\nurl = "https://a.example"\nmax_results = 5\n'
    env = {"CORRAL_WEB_SEARCH_URL": "https://b.example", "CORRAL_WEB_SEARCH_MAX_USES": "2"}
    config = load(tmp_path, toml, env).web_search
    assert (config.url, config.max_results, config.max_uses) == ("https://b.example", 5, 2)


def test_environment_alone_configures_a_provider(tmp_path: Path) -> None:
    env = {
        "CORRAL_WEB_SEARCH_PROVIDER": "tavily",
        "CORRAL_WEB_SEARCH_API_KEY_ENV": "TV",
        "TV": "tvly-x",
        "CORRAL_WEB_SEARCH_URL": "http://127.0.0.1:9/",
    }
    config = load(tmp_path, "", env).web_search
    assert config.provider == "tavily" and config.url == "http://127.0.0.1:9"
    assert config.api_key == "tvly-x"


def test_bad_environment_value_is_named(tmp_path: Path) -> None:
    env = {"CORRAL_WEB_SEARCH_PROVIDER": "searxng", "CORRAL_WEB_SEARCH_URL": "http://x"}
    env["CORRAL_WEB_SEARCH_MAX_RESULTS"] = "lots"
    with pytest.raises(ValueError, match=r"max_results: must be an integer from 1 to 50"):
        load(tmp_path, "", env)
