"""The schema versions this build knows, and the refusal to open data written by a newer one.

Migrations only go forward (`migrations/*/NNNN_*.sql`, recorded in `schema_version`). A build
older than its data would read rows it does not understand and fail on every session it
touched, so opening such a database stops at once with both versions named.
"""

from __future__ import annotations

from importlib import resources
from importlib.resources.abc import Traversable

from corral import __version__


class SchemaTooNew(Exception):
    """The database was migrated by a newer Corral than this one."""

    def __init__(self, found: int, supported: int, where: str) -> None:
        self.found, self.supported, self.where = found, supported, where
        super().__init__(
            f"{where} has schema version {found}, newer than the {supported} this Corral "
            f"({__version__}) supports: it was upgraded by a newer release. Run that release "
            "(or newer), or restore the backup taken before the upgrade (docs/operations.md)."
        )


def scripts(backend: str) -> list[tuple[int, Traversable]]:
    """`(version, script)` of `migrations/<backend>/`, in order."""
    folder = resources.files("corral.store").joinpath(f"migrations/{backend}")
    return sorted(
        (int(item.name.split("_", 1)[0]), item)
        for item in folder.iterdir()
        if item.name.endswith(".sql")
    )


def check_not_newer(found: int, backend: str, where: str) -> None:
    """Raise `SchemaTooNew` if `found` is past the last migration this build has."""
    supported = max((version for version, _ in scripts(backend)), default=0)
    if found > supported:
        raise SchemaTooNew(found, supported, where)
