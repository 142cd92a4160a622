"""The settings model is complete and documented; docs/configuration.md is not stale."""

from __future__ import annotations

import re
from pathlib import Path

from corral.settings.model import WEB_SEARCH_KEYS, Settings, env_names, keys
from corral.settings.render import DOCS_COMMAND, docs, redact_url
from corral.settings.sources import known_variables

ROOT = Path(__file__).resolve().parents[2]


def test_docs_configuration_md_is_generated_from_the_model() -> None:
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == docs(), f"docs/configuration.md is stale: run `{DOCS_COMMAND}`"


def test_every_setting_has_a_description_a_toml_key_and_its_own_variable() -> None:
    settings = keys()
    assert set(Settings.model_fields) - set(settings) == {"env", "origins"}
    for name, key in settings.items():
        assert Settings.model_fields[name].description, name
        assert env_names(name, key)[0] == f"CORRAL_{name.upper()}"
    assert len({key.toml for key in settings.values()}) == len(settings)
    variables = known_variables()
    assert len(set(variables)) == len(variables)


def test_every_corral_variable_the_code_reads_is_a_setting() -> None:
    """A `CORRAL_*` name in src/ outside the settings is a setting someone forgot."""
    known = set(known_variables()) | {"CORRAL_WEB_SEARCH_"}
    found = set()
    for path in (ROOT / "src" / "corral").rglob("*.py"):
        if path.name == "conformance.py":
            continue  # variables it sets inside sandboxes, to see what commands inherit
        found |= set(re.findall(r"\bCORRAL_[A-Z_]*[A-Z]\b|\bCORRAL_WEB_SEARCH_", path.read_text()))
    assert found - known == set()


def test_redact_url() -> None:
    assert redact_url("postgresql://u:p@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert redact_url("https://h/x?token=t&page=2") == "https://h/x?token=***&page=2"
    assert redact_url("/var/lib/corral.db") == "/var/lib/corral.db"


def test_the_documented_web_search_keys_are_the_parsers() -> None:
    from corral import web_search_config

    assert tuple(WEB_SEARCH_KEYS) == web_search_config._KEYS
