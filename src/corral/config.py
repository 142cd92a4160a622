"""Settings, loaded once (CLI flags > environment > corral.toml > defaults) and passed down.

No other module reads the process environment for configuration. The model, its sources and
its validation live in `corral.settings`; this module keeps the names the rest of Corral
imports.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corral.settings import ConfigError, Settings, load

__all__ = ["ConfigError", "Settings", "ensure_api_keys", "load_settings"]
log = logging.getLogger("corral.config")


def load_settings(
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
) -> Settings:
    """Merge the sources; raises ConfigError (a ValueError) with a one-line message."""
    loaded = load(overrides, environ, config_file)
    for warning in loaded.warnings:
        log.warning("%s", warning)
    return loaded.settings


def ensure_api_keys(settings: Settings) -> tuple[Settings, str | None]:
    """Settings with keys; generates and stores one (mode 0600) on first start.

    Returns the new key when one was generated, so the caller can print it once.
    """
    if settings.api_keys:
        return settings, None
    key_file = settings.data_dir / "api_key"
    if key_file.exists():
        return settings.model_copy(update={"api_keys": (key_file.read_text().strip(),)}), None
    settings.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = "crl_" + secrets.token_urlsafe(32)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return settings.model_copy(update={"api_keys": (key,)}), key
