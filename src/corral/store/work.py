"""Picks the `WorkItems` backend that lives beside a store (same file or database)."""

from __future__ import annotations

from corral.store.base import Store
from corral.store.postgres import PostgresStore
from corral.store.postgres_work import PostgresWorkItems
from corral.store.sqlite import SqliteStore
from corral.store.sqlite_work import SqliteWorkItems
from corral.store.work_base import WorkItems


def work_items_for(store: Store) -> WorkItems:
    """The work queue stored with `store` (which must be a built-in backend)."""
    if isinstance(store, SqliteStore):
        return SqliteWorkItems(store.db)
    if isinstance(store, PostgresStore):
        pg = store
        return PostgresWorkItems(lambda: pg.pool)
    raise TypeError(f"no work queue for store {type(store).__name__}")
