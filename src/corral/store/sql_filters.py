"""The list filters both SQL stores share, written once for both placeholder styles (`?` for
SQLite, `%s` for psycopg); each store adds what its dialect spells differently."""

from __future__ import annotations

from typing import Any, Literal

from corral.session.log import EventQuery
from corral.store.base import Page, SessionFilter

Mark = Literal["?", "%s"]


def page_where(page: Page, mark: Mark) -> tuple[str, list[Any]]:
    """` AND …` clauses (cursor, archived, created bounds) over id/created_at/archived_at."""
    clauses: list[str] = []
    args: list[Any] = []
    if page.after_id is not None:
        clauses.append(f"id {'<' if page.order == 'desc' else '>'} {mark}")
        args.append(page.after_id)
    if not page.include_archived:
        clauses.append("archived_at IS NULL")
    _add_bounds(clauses, args, mark, _created_bounds(page))
    return "".join(f" AND {c}" for c in clauses), args


def session_columns_where(
    where: SessionFilter, clause: str, args: list[Any], mark: Mark
) -> tuple[str, list[Any]]:
    """Extend `page_where`'s clauses with the `sessions.list` filters on plain columns."""
    if where.parent_id is None:
        clause += " AND parent_id IS NULL"
    else:
        clause += f" AND parent_id = {mark}"
        args.append(where.parent_id)
    for column, value in (
        ("agent_id", where.agent_id),
        ("agent_version", where.agent_version),
        ("environment_id", where.environment_id),
    ):
        if value is not None:
            clause += f" AND {column} = {mark}"
            args.append(value)
    return clause, args


def direction(page: Page) -> str:
    """SQL sort direction of a page."""
    return "DESC" if page.order == "desc" else "ASC"


def event_where(session_id: str, query: EventQuery, mark: Mark) -> tuple[list[str], list[Any]]:
    """Clauses and arguments selecting one log's events by seq and time bounds (each store
    adds the type filter in its own dialect)."""
    clauses: list[str] = [f"session_id = {mark}"]
    args: list[Any] = [session_id]
    seq_bounds = (("seq >", query.after_seq), ("seq <", query.before_seq))
    _add_bounds(clauses, args, mark, (*seq_bounds, *_created_bounds(query)))
    return clauses, args


def _created_bounds(bounded: Page | EventQuery) -> tuple[tuple[str, str | None], ...]:
    """The `created_at[gt|gte|lt|lte]` filters a page or an event query carries."""
    return (
        ("created_at >", bounded.created_gt),
        ("created_at >=", bounded.created_gte),
        ("created_at <", bounded.created_lt),
        ("created_at <=", bounded.created_lte),
    )


def _add_bounds(
    clauses: list[str], args: list[Any], mark: Mark, bounds: tuple[tuple[str, Any], ...]
) -> None:
    """`column op mark` for every bound that is set."""
    for column_op, value in bounds:
        if value is not None:
            clauses.append(f"{column_op} {mark}")
            args.append(value)
