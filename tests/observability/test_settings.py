"""`[metrics]` and `[tracing]` settings: sources, precedence and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.config import load_settings


def test_defaults_keep_metrics_private_and_tracing_off(tmp_path: Path) -> None:
    settings = load_settings(environ={}, config_file=tmp_path / "absent.toml")
    assert settings.metrics_public is False
    assert settings.metrics_port is None
    assert settings.tracing_endpoint is None


def test_toml_and_environment(tmp_path: Path) -> None:
    toml = '[metrics]\npublic = true\nport = 9464\n[tracing]\nendpoint = "http://otel:4318/"\n'
    path = tmp_path / "corral.toml"
    path.write_text(toml)
    settings = load_settings(environ={}, config_file=path)
    assert (settings.metrics_public, settings.metrics_port) == (True, 9464)
    assert settings.tracing_endpoint == "http://otel:4318/v1/traces"
    env = {
        "CORRAL_METRICS_PUBLIC": "0",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c.example/custom/traces",
        "OTEL_SERVICE_NAME": "corral-eu",
    }
    settings = load_settings(environ=env, config_file=path)
    assert settings.metrics_public is False  # the environment wins over the file
    assert settings.tracing_endpoint == "https://c.example/custom/traces"
    assert settings.tracing_service_name == "corral-eu"


@pytest.mark.parametrize(
    ("toml", "environ", "message"),
    [
        ('[metrics]\npublic = "yes"\n', {}, "[metrics] public"),
        ("[metrics]\nport = 70000\n", {}, "[metrics] port"),
        ('[tracing]\nendpoint = "otel:4318"\n', {}, "[tracing] endpoint"),
        ("", {"CORRAL_METRICS_PUBLIC": "true"}, "CORRAL_METRICS_PUBLIC"),
        ("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "grpc://x"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ],
)
def test_bad_values_are_refused_by_name(
    tmp_path: Path, toml: str, environ: dict[str, str], message: str
) -> None:
    path = tmp_path / "corral.toml"
    path.write_text(toml)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_settings(environ=environ, config_file=path)
