"""Corral's settings: one validated model over corral.toml, `CORRAL_*` variables and flags.

`corral.config` re-exports what the rest of Corral uses (`Settings`, `load_settings`).
"""

from corral.settings.model import Settings
from corral.settings.sources import ConfigError, Loaded, load

__all__ = ["ConfigError", "Loaded", "Settings", "load"]
