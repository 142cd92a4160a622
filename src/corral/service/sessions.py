"""Sessions: an agent version pinned to an environment, plus their event logs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from corral.errors import BadRequest, NotFound
from corral.ids import new_id, now_rfc3339, parse_rfc3339, utc_now
from corral.observability.metrics import SESSIONS_CREATED
from corral.pricing import Price, money, parse_budget
from corral.service.agents import AgentService, model_config
from corral.service.common import apply_metadata_patch, page_envelope
from corral.service.multiagent import expand_roster
from corral.service.resources import SessionResources
from corral.session.projection import LIST_COST_NANOS
from corral.store.base import Page, SessionFilter, SessionRow, Store
from corral.store.work_base import WorkItems
from corral.tools.resolve import resolve_tools
from corral.vault.secrets import VAULT_KIND
from corral.wire.sessions import (
    AgentRef,
    AgentWithOverrides,
    FileResource,
    SessionCreate,
    SessionUpdate,
)

_KNOWN_ENVIRONMENTS = 4096
"""Cloud environment ids remembered by `SessionService.self_hosted` (forgotten all at once)."""
_SNAPSHOT_KEYS = (
    "id",
    "version",
    "name",
    "description",
    "system",
    "model",
    "tools",
    "mcp_servers",
    "skills",
    "multiagent",
    "execution_identity",
)


def client_event(body: dict[str, Any]) -> dict[str, Any]:
    """A client-sent event as stored: server id, processed_at set at append."""
    return {"id": new_id("sevt"), **body}


class SessionService:
    """Create, read, update and delete sessions.

    Sandboxes are not touched here: they follow the rows from the process that holds them
    (`SandboxPool.tick`). `purge` removes a deleted session's files when no sandbox uses
    them anymore (else the holder's pool does it after destroying the sandbox).
    """

    def __init__(
        self,
        store: Store,
        agents: AgentService,
        resources: SessionResources,
        *,
        purge: Callable[[str], Awaitable[object]] | None = None,
        work: WorkItems | None = None,
        work_ttl_seconds: int = 90,
        prices: Callable[[str], Price | None] | None = None,
    ) -> None:
        self.store = store
        self.agents = agents
        self.resources = resources
        self._purge = purge
        self._work = work
        self._work_ttl = work_ttl_seconds
        self._prices = prices
        self._not_self_hosted: set[str] = set()
        """Environments known not to be self_hosted: a type never changes and ids are never
        reused, so the answer stands (deleted or not, such a session queues no work)."""

    async def create(self, req: SessionCreate) -> dict[str, Any]:
        """A new idle session; `initial_events` are appended and wake the brain."""
        environment = await self.store.get_resource("environment", req.environment_id)
        if environment is None:
            raise NotFound(
                f"environment {req.environment_id} not found", error_code="environment_not_found"
            )
        if environment.archived_at is not None:
            raise BadRequest(
                f"environment {req.environment_id} is archived", error_code="environment_archived"
            )
        remote = environment.body["config"]["type"] == "self_hosted"
        if remote and self._work is None:
            raise BadRequest("environment_id: this server has no work queue for self_hosted")
        vault_ids = await self._check_vaults(req.vault_ids or [])
        snapshot = await self._snapshot(req.agent)
        if snapshot.get("multiagent") and (remote or req.budget is not None):
            field = "environment_id" if remote else "budget"
            raise BadRequest(
                f"{field}: multiagent sessions cannot use "
                f"{'self_hosted environments' if remote else 'budgets'} on this server yet"
            )
        budget = None if req.budget is None else self._checked_budget(snapshot, req.budget)
        now = now_rfc3339()
        tokens: dict[str, str] = {}  # repository tokens, stored sealed once the session exists
        body: dict[str, Any] = {
            "agent": snapshot,
            "resources": await self.resources.build_all(
                list(req.resources or []), tokens, remote=remote
            ),
            "vault_ids": vault_ids,
            "title": req.title,
            "metadata": dict(req.metadata or {}),
            "outcome_evaluations": [],
            "budget": budget,
            "deployment_id": None,
        }
        row = SessionRow(
            id=new_id("sesn"),
            created_at=now,
            updated_at=now,
            environment_id=req.environment_id,
            agent_id=snapshot["id"],
            agent_version=int(snapshot["version"]),
            body=body,
        )
        initial = [client_event(e.model_dump(exclude_none=True)) for e in req.initial_events or []]
        for event in initial:
            if event["type"] != "user.message":
                raise BadRequest("initial_events: user.define_outcome is not supported yet")
        if remote:  # its built-in tools run on a worker (brain/remote.py), which it needs now
            initial.insert(0, client_event({"type": "corral.hands_remote"}))
        if budget is not None:  # the brain reads its budget from the log (brain/state.py)
            initial.insert(0, client_event({"type": "corral.budget", "budget": budget}))
        await self.store.create_session(row, initial)
        SESSIONS_CREATED.inc()
        await self.resources.save_tokens(row.id, tokens)
        if remote and self._work is not None:
            await self._work.ensure_work(row.environment_id, row.id, self._work_ttl)
        return await self.get(row.id)

    async def input_arrived(self, row: SessionRow) -> None:
        """A self-hosted session received a new user message: queue a work item unless one
        is live, so a session whose worker left gets hands again (an item is also queued when
        the brain waits on a built-in call; `ensure_work` keeps it to one live item)."""
        if self._work is None:
            return
        if await self.self_hosted(row.environment_id):
            await self._work.ensure_work(row.environment_id, row.id, self._work_ttl)

    async def self_hosted(self, environment_id: str) -> bool:
        """Whether the environment exists and is self_hosted (its built-in tools run on a
        worker); a cloud environment is remembered, so its sessions' turns read no row."""
        if environment_id in self._not_self_hosted:
            return False
        env = await self.store.get_resource("environment", environment_id)
        if env is None:
            return False
        if env.body["config"]["type"] == "self_hosted":
            return True
        if len(self._not_self_hosted) >= _KNOWN_ENVIRONMENTS:
            self._not_self_hosted.clear()
        self._not_self_hosted.add(environment_id)
        return False

    def _checked_budget(self, agent: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
        """A budget as stored, for a session running `agent`; 400s say why not."""
        try:
            budget, _ = parse_budget(value)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        model = str(agent["model"]["id"])
        if self._prices is None or self._prices(model) is None:
            raise BadRequest(
                f"budget: model {model!r} has no list price, so a budget cannot measure it; "
                "set `price` on its route in corral.toml",
                error_code="model_not_budgetable",
            )
        return budget

    def _new_budget(self, row: SessionRow, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """The budget after an update that sent `budget`; 400s for the SDK's refusals."""
        if row.summary.status == "terminated":
            raise BadRequest("budget: the session is terminated")
        current = row.body.get("budget")
        if current is None:  # none to remove, and none may be added
            raise BadRequest(
                "budget: a budget can only be set when the session is created (and a removed "
                "one cannot be re-added)",
                error_code="budget_create_only",
            )
        if value is None:
            return None
        budget = self._checked_budget(row.body["agent"], value)
        _, ceiling = parse_budget(budget)
        spent = int(row.summary.usage.get(LIST_COST_NANOS, 0))
        if budget != current and ceiling <= spent:
            raise BadRequest(
                f"budget.max_list_cost: must be above the list cost already consumed "
                f"({money(spent)['amount']} cents)",
                error_code="budget_not_raised",
            )
        return budget

    async def _check_vaults(self, vault_ids: list[str]) -> list[str]:
        """The session's vaults, fixed at creation; each must exist and not be archived."""
        for index, vault_id in enumerate(vault_ids):
            vault = await self.store.get_resource(VAULT_KIND, vault_id)
            if vault is None:
                raise BadRequest(
                    f"vault_ids[{index}]: vault {vault_id} not found", error_code="vault_not_found"
                )
            if vault.archived_at is not None:
                raise BadRequest(
                    f"vault_ids[{index}]: vault {vault_id} is archived", error_code="vault_archived"
                )
        return list(dict.fromkeys(vault_ids))

    async def _snapshot(self, ref: str | AgentRef | AgentWithOverrides) -> dict[str, Any]:
        if isinstance(ref, str):
            agent = await self.agents.get(ref)
        else:
            agent = await self.agents.get(ref.id, ref.version)
        if agent.get("archived_at"):
            raise BadRequest(f"agent {agent['id']} is archived", error_code="agent_archived")
        snapshot: dict[str, Any] = {"type": "agent", **{k: agent.get(k) for k in _SNAPSHOT_KEYS}}
        if isinstance(ref, AgentWithOverrides):
            _apply_overrides(snapshot, ref, self.agents.tool_providers)
            if "skills" in ref.model_fields_set:
                snapshot["skills"] = await self.agents.resolve_skills(ref.skills or [])
            self.agents.check_model(str(snapshot["model"]["id"]))
        snapshot["multiagent"] = await expand_roster(self.store, snapshot.get("multiagent"))
        return snapshot

    async def get(self, session_id: str) -> dict[str, Any]:
        """The session with status, usage and stats from its log."""
        return render_session(await self.row(session_id))

    async def row(self, session_id: str) -> SessionRow:
        """The stored row, or NotFound."""
        row = await self.store.get_session(session_id)
        if row is None or row.parent_id is not None:  # a child thread is not a session
            raise NotFound(f"session {session_id} not found")
        return row

    async def update(self, session_id: str, req: SessionUpdate) -> dict[str, Any]:
        """Title/metadata/agent tools; a `session.updated` event records the change."""
        row = await self.row(session_id)
        body = dict(row.body)
        sent = req.model_fields_set
        changed: dict[str, Any] = {}
        if "vault_ids" in sent:
            raise BadRequest("vault_ids: cannot be changed after creation")
        if "budget" in sent and (budget := self._new_budget(row, req.budget)) != body["budget"]:
            body["budget"] = changed["budget"] = budget
        if "title" in sent:
            body["title"] = changed["title"] = req.title
        if "metadata" in sent:
            body["metadata"] = changed["metadata"] = apply_metadata_patch(
                body["metadata"], req.metadata
            )
        if "agent" in sent and req.agent is not None:
            if row.summary.status == "running":
                raise BadRequest("agent: cannot change tools while the session is running")
            body["agent"] = changed["agent"] = _updated_agent(
                body["agent"], req, self.agents.tool_providers
            )
        if changed:
            await self.store.update_session(session_id, body)
            await self.store.append(
                session_id, [client_event({"type": "session.updated", **changed})]
            )
        return await self.get(session_id)

    async def archive(self, session_id: str) -> dict[str, Any]:
        """Archive: kept readable, hidden from default lists."""
        row = await self.row(session_id)
        if row.archived_at is None:
            await self.store.update_session(session_id, row.body, archived_at=now_rfc3339())
            if row.summary.status != "terminated":
                # Archiving ends the session: no further turns, as the status says.
                terminated = client_event({"type": "session.status_terminated"})
                await self.store.append(session_id, [terminated])
            for child in await self._children(session_id):  # its threads end with it
                if child.archived_at is None:
                    await self.store.update_session(child.id, child.body, archived_at=now_rfc3339())
                    ended = client_event({"type": "session.status_terminated"})
                    await self.store.append(child.id, [ended], wake=True)
        return await self.get(session_id)

    async def _children(self, session_id: str) -> list[SessionRow]:
        return await self.store.list_sessions(
            Page(limit=1000, include_archived=True), SessionFilter(parent_id=session_id)
        )

    async def delete(self, session_id: str) -> dict[str, Any]:
        """Delete the session and its log, then its files unless a sandbox still uses them."""
        row = await self.store.get_session(session_id)
        if row is None or row.parent_id is not None:
            raise NotFound(f"session {session_id} not found")
        for child in await self._children(session_id):  # its threads' logs go with it
            await self.store.delete_session(child.id)
        if not await self.store.delete_session(session_id):
            raise NotFound(f"session {session_id} not found")
        await self.resources.forget_tokens(row.body.get("resources") or [])
        await self.resources.files.delete_session_files(session_id)
        if self._purge is not None:
            await self._purge(session_id)
        return {"id": session_id, "type": "session_deleted"}

    async def add_resource(self, session_id: str, item: FileResource) -> dict[str, Any]:
        """Mount another file; a live sandbox is re-made at its next call to see it."""
        row = await self.row(session_id)
        body = dict(row.body)
        taken = {r["mount_path"] for r in body["resources"]}
        env = await self.store.get_resource("environment", row.environment_id)
        remote = env is not None and env.body["config"]["type"] == "self_hosted"
        entry = await self.resources.build(item, "body", taken, remote=remote)
        body["resources"] = [*body["resources"], entry]
        await self.store.update_session(session_id, body)
        return entry

    async def resource(self, session_id: str, resource_id: str) -> dict[str, Any]:
        """One resource."""
        row = await self.row(session_id)
        for entry in row.body["resources"]:
            if entry.get("id") == resource_id:
                return dict(entry)
        raise NotFound(f"resource {resource_id} not found in session {session_id}")

    async def delete_resource(self, session_id: str, resource_id: str) -> dict[str, Any]:
        """Unmount."""
        await self.resource(session_id, resource_id)
        row = await self.row(session_id)
        body = dict(row.body)
        body["resources"] = [r for r in body["resources"] if r.get("id") != resource_id]
        await self.store.update_session(session_id, body)
        gone = [r for r in row.body["resources"] if r.get("id") == resource_id]
        await self.resources.forget_tokens(gone)
        return {"id": resource_id, "type": "session_resource_deleted"}

    async def update_resource(
        self, session_id: str, resource_id: str, token: str
    ) -> dict[str, Any]:
        """Rotate a repository's token; the resource's `updated_at` moves (and with it the
        sandbox's recipe, so a repository whose clone failed is tried again)."""
        entry = await self.resource(session_id, resource_id)
        await self.resources.rotate_token(session_id, entry, token)
        row = await self.row(session_id)
        body = dict(row.body)
        entry = {**entry, "updated_at": now_rfc3339()}
        body["resources"] = [entry if r.get("id") == resource_id else r for r in body["resources"]]
        await self.store.update_session(session_id, body)
        return entry

    async def list(self, page: Page, where: SessionFilter) -> dict[str, Any]:
        """A page of sessions."""
        rows = await self.store.list_sessions(page, where)
        envelope = page_envelope(rows, page.limit, render_session, lambda r: r.id)
        envelope["prev_page"] = None
        return envelope


def _apply_overrides(
    snapshot: dict[str, Any], ref: AgentWithOverrides, providers: frozenset[str]
) -> None:
    sent = ref.model_fields_set
    if "model" in sent and ref.model is not None:
        snapshot["model"] = model_config(ref.model, snapshot.get("model"))
    if "system" in sent:
        snapshot["system"] = ref.system
    if "tools" in sent or "mcp_servers" in sent:
        from corral.wire.agents import McpServer

        servers = (
            ref.mcp_servers
            if "mcp_servers" in sent
            else [McpServer.model_validate(m) for m in snapshot.get("mcp_servers") or []]
        )
        if "tools" not in sent:
            raise BadRequest("agent.tools: required when overriding mcp_servers")
        snapshot["tools"] = resolve_tools(list(ref.tools or []), list(servers or []), providers)
        snapshot["mcp_servers"] = [s.model_dump() for s in servers or []]


def _updated_agent(
    agent: dict[str, Any], req: SessionUpdate, providers: frozenset[str]
) -> dict[str, Any]:
    from corral.wire.agents import McpServer

    assert req.agent is not None
    sent = req.agent.model_fields_set
    servers = (
        req.agent.mcp_servers
        if "mcp_servers" in sent
        else [McpServer.model_validate(m) for m in agent.get("mcp_servers") or []]
    )
    if "tools" not in sent:
        raise BadRequest("agent.tools: required when updating a session's agent")
    updated = dict(agent)
    updated["tools"] = resolve_tools(list(req.agent.tools or []), list(servers or []), providers)
    updated["mcp_servers"] = [s.model_dump() for s in servers or []]
    return updated


def render_session(row: SessionRow) -> dict[str, Any]:
    """The wire `session` object."""
    stats = row.summary.stats
    active = float(stats.get("active_seconds", 0.0))
    running_since = stats.get("running_since")
    now = utc_now()
    if running_since:
        active += max((now - parse_rfc3339(running_since)).total_seconds(), 0.0)
    created: datetime = parse_rfc3339(row.created_at)
    usage = dict(row.summary.usage)
    usage["active_seconds"] = active
    cost = usage.pop(LIST_COST_NANOS, None)
    if cost is not None:
        usage["list_cost"] = money(int(cost))
    return {
        "id": row.id,
        "type": "session",
        "status": row.summary.status,
        "environment_id": row.environment_id,
        **row.body,
        "usage": usage,
        "stats": {
            "active_seconds": active,
            "duration_seconds": max((now - created).total_seconds(), 0.0),
        },
        "created_at": row.created_at,
        "updated_at": row.updated_at or row.created_at,
        "archived_at": row.archived_at,
    }
