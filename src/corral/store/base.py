"""The `Store` contract every backend (SQLite, PostgreSQL) implements and the conformance
suite checks. Rows are plain JSON bodies plus the few columns lists filter on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from corral.session.log import EventLog, SessionSummary, StoredEvent
from corral.session.projection import CallBook
from corral.session.queue import WorkQueue
from corral.store.memory import MemoryTable

ResourceKind = Literal["agent", "environment", "file", "skill"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resource:
    """A stored API object (the latest version for agents)."""

    kind: str
    id: str
    body: dict[str, Any]
    created_at: str
    archived_at: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRow:
    """A session's configuration plus the summary projected from its log."""

    id: str
    created_at: str
    environment_id: str
    agent_id: str
    agent_version: int
    body: dict[str, Any]
    """Wire fields fixed or edited by the API: agent snapshot, resources, title, metadata…"""
    summary: SessionSummary = field(default_factory=SessionSummary)
    archived_at: str | None = None
    updated_at: str | None = None
    parent_id: str | None = None
    """Set on a child thread's row: the session it belongs to (docs/threads.md)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """A cursor-paginated list request; `after_id` is exclusive in the list's order."""

    limit: int = 20
    after_id: str | None = None
    order: Literal["asc", "desc"] = "asc"
    include_archived: bool = False
    created_gt: str | None = None
    created_gte: str | None = None
    created_lt: str | None = None
    created_lte: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionFilter:
    """Filters of `sessions.list`."""

    agent_id: str | None = None
    agent_version: int | None = None
    statuses: Sequence[str] = ()
    environment_id: str | None = None
    memory_store_id: str | None = None
    """Sessions with a `memory_store` resource of this store."""
    parent_id: str | None = None
    """None: sessions (rows without a parent); set: the child threads of that session."""


class ResourceStore(Protocol):
    """Agents (+ versions), environments and sessions."""

    async def insert_resource(self, resource: Resource) -> None:
        """Store a new object.

        Raises:
            Conflict: the id exists.
        """
        ...

    async def get_resource(self, kind: str, resource_id: str) -> Resource | None:
        """The object, or None."""
        ...

    async def replace_resource(self, resource: Resource) -> None:
        """Overwrite body/archived_at of an existing object.

        Raises:
            NotFound: no such object.
        """
        ...

    async def delete_resource(self, kind: str, resource_id: str) -> bool:
        """Remove an object; False if it did not exist."""
        ...

    async def list_resources(self, kind: str, page: Page) -> list[Resource]:
        """Objects in id (= creation) order, `page.limit + 1` at most so callers see more."""
        ...

    async def put_agent_version(self, agent: Resource, expected_version: int | None) -> None:
        """Store `agent.body` as version `agent.body["version"]` and make it the latest.

        Raises:
            Conflict: the latest version is not `expected_version` (or that version exists).
        """
        ...

    async def get_agent_version(self, agent_id: str, version: int) -> Resource | None:
        """A pinned version, or None."""
        ...

    async def list_agent_versions(self, agent_id: str, page: Page) -> list[Resource]:
        """Versions by number; `page.after_id` is a version number as text."""
        ...

    async def create_session(
        self, row: SessionRow, initial_events: Sequence[dict[str, Any]]
    ) -> None:
        """Insert the session and append `initial_events` (waking it if any) atomically."""
        ...

    async def get_session(self, session_id: str) -> SessionRow | None:
        """The session, or None once deleted."""
        ...

    async def update_session(
        self, session_id: str, body: dict[str, Any], *, archived_at: str | None = None
    ) -> None:
        """Replace the session's body (and set archived_at when given).

        Raises:
            NotFound: no such session.
        """
        ...

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session and its log; followers get `SessionGone`."""
        ...

    async def list_sessions(self, page: Page, where: SessionFilter) -> list[SessionRow]:
        """Sessions in the page's order, `page.limit + 1` at most."""
        ...


EventCheck = Callable[[CallBook, int, dict[str, Any]], None]
"""Validates the `index`-th event of a checked append against the call projection with the
append's earlier events already applied; raises (e.g. BadRequest, Conflict) to refuse the whole
append. It may run more than once for one append (a backend may redo its transaction), so it
must be pure."""


class CheckedLog(Protocol):
    """Client appends validated against the tool-call projection, atomically."""

    async def append_checked(
        self,
        session_id: str,
        events: Sequence[dict[str, Any]],
        check: EventCheck,
        *,
        wake: bool = False,
    ) -> list[StoredEvent]:
        """Append like `EventLog.append` (without a fence), after `check` accepted every event.

        `check` runs inside the append's transaction, serialised with every other append to
        the session, against the projection as of all earlier appends plus this append's
        earlier events: of two concurrent appends answering one call, the later one sees the
        earlier's answer. Only the calls the events refer to are read, never the log. All or
        nothing: when `check` raises, nothing is appended and nothing is woken.

        Raises:
            NotFound: no such session.
            Exception: whatever `check` raised.
        """
        ...

    async def read_calls(
        self, session_id: str, ids: Sequence[str] | None = None
    ) -> CallBook | None:
        """The call projection (status, pending interrupt, calls `ids` or, if None, all of
        the session's calls); None for an unknown session."""
        ...


class Store(EventLog, CheckedLog, WorkQueue, ResourceStore, MemoryTable, Protocol):
    """Everything Corral persists."""

    async def open(self) -> None:
        """Connect and apply pending migrations."""
        ...

    async def aclose(self) -> None:
        """Flush and disconnect."""
        ...

    async def ping(self, timeout: float) -> None:
        """Run a trivial query; `StoreUnavailable` if it takes more than `timeout` seconds."""
        ...
