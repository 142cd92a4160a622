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
    for op, value in (
        (">", page.created_gt),
        (">=", page.created_gte),
        ("<", page.created_lt),
        ("<=", page.created_lte),
    ):
        if value is not None:
            clauses.append(f"created_at {op} {mark}")
            args.append(value)
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
    for column_op, value in (
        ("seq >", query.after_seq),
        ("seq <", query.before_seq),
        ("created_at >", query.created_gt),
        ("created_at >=", query.created_gte),
        ("created_at <", query.created_lt),
        ("created_at <=", query.created_lte),
    ):
        if value is not None:
            clauses.append(f"{column_op} {mark}")
            args.append(value)
    return clauses, args
