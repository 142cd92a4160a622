"""Agents: versioned configurations; every accepted update makes a new version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from corral.errors import BadRequest, NotFound
from corral.ids import new_id, now_rfc3339
from corral.service.common import apply_metadata_patch, check_limit, page_envelope
from corral.service.multiagent import resolve_multiagent
from corral.store.base import Page, Resource, Store
from corral.tools.resolve import resolve_tools
from corral.wire.agents import AgentCreate, AgentUpdate, McpServer, ModelConfig, SkillRef

DEFAULT_EFFORT = "high"


def model_config(
    model: str | ModelConfig, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The response form of `model`: always an object with `effort` as `{type}`."""
    if isinstance(model, str):
        model = ModelConfig(id=model)
    effort = model.effort
    if effort is None:
        kept = (previous or {}).get("effort")
        effort_obj = kept if kept else {"type": DEFAULT_EFFORT}
    else:
        effort_obj = {"type": effort if isinstance(effort, str) else effort.type}
    return {
        "id": model.id,
        "effort": effort_obj,
        "inference_geo": model.inference_geo,
        "speed": model.speed or "standard",
    }


SkillResolver = Callable[[str, str, str | None], Awaitable[str]]
"""(type, skill_id, version or None) -> concrete version id; raises BadRequest."""


class AgentService:
    """CRUD for agents and their versions."""

    def __init__(
        self,
        store: Store,
        model_check: Callable[[str], object] | None = None,
        skill_resolver: SkillResolver | None = None,
        tool_providers: frozenset[str] = frozenset(),
    ) -> None:
        self.store = store
        self.tool_providers = tool_providers
        """Provider-backed built-ins this server serves (`resolve.PROVIDER_BUILTINS`)."""
        self._model_check = model_check
        self._skill_resolver = skill_resolver

    async def resolve_skills(self, skills: list[SkillRef]) -> list[dict[str, Any]]:
        """Skill references pinned to a concrete version (`latest` resolved now)."""
        if skills and self._skill_resolver is None:
            raise BadRequest("skills: this server has no skill store")
        out = []
        for ref in skills:
            assert self._skill_resolver is not None
            version = await self._skill_resolver(ref.type, ref.skill_id, ref.version)
            out.append({"type": ref.type, "skill_id": ref.skill_id, "version": version})
        names = [s["skill_id"] for s in out]
        if len(names) != len(set(names)):
            raise BadRequest("skills: each skill may be attached once")
        return out

    def check_model(self, model: str) -> None:
        """Refuse models no provider route serves, at save time rather than at run time."""
        if self._model_check is None:
            return
        try:
            self._model_check(model)
        except ValueError as exc:
            raise BadRequest(
                f"model: no provider is configured for {model!r} ({exc}); add a route in "
                "corral.toml",
                error_code="unknown_model",
            ) from exc

    async def create(self, req: AgentCreate) -> dict[str, Any]:
        """Version 1 of a new agent."""
        now = now_rfc3339()
        mcp = req.mcp_servers or []
        body: dict[str, Any] = {
            "id": new_id("agent"),
            "type": "agent",
            "version": 1,
            "name": req.name,
            "description": req.description,
            "system": req.system,
            "model": model_config(req.model),
            "tools": resolve_tools(list(req.tools or []), mcp, self.tool_providers),
            "mcp_servers": [m.model_dump() for m in mcp],
            "skills": await self.resolve_skills(req.skills or []),
            "multiagent": None,
            "metadata": dict(req.metadata or {}),
            "execution_identity": _identity(req.execution_identity),
            "created_at": now,
            "updated_at": now,
            "archived_at": None,
        }
        self.check_model(str(body["model"]["id"]))
        body["multiagent"] = await resolve_multiagent(self.store, req.multiagent, body["tools"])
        agent = Resource(kind="agent", id=body["id"], body=body, created_at=now)
        await self.store.put_agent_version(agent, expected_version=None)
        return body

    async def get(self, agent_id: str, version: int | None = None) -> dict[str, Any]:
        """Latest or pinned version."""
        if version is not None:
            found = await self.store.get_agent_version(agent_id, version)
        else:
            found = await self.store.get_resource("agent", agent_id)
        if found is None:
            suffix = f" version {version}" if version is not None else ""
            raise NotFound(f"agent {agent_id}{suffix} not found")
        return found.body

    async def update(self, agent_id: str, req: AgentUpdate) -> dict[str, Any]:
        """A new version with the sent fields changed; stale `version` is a Conflict."""
        current = await self.store.get_resource("agent", agent_id)
        if current is None:
            raise NotFound(f"agent {agent_id} not found")
        if current.archived_at is not None:
            raise BadRequest(f"agent {agent_id} is archived", error_code="agent_archived")
        body = _apply_update(dict(current.body), req, self.tool_providers)
        if "multiagent" in req.model_fields_set or "tools" in req.model_fields_set:
            value = body.get("multiagent")
            if "multiagent" not in req.model_fields_set and value is not None:
                value = _unresolve_multiagent(value)
            body["multiagent"] = await resolve_multiagent(
                self.store, value, body["tools"], agent_id
            )
        if "skills" in req.model_fields_set:
            body["skills"] = await self.resolve_skills(req.skills or [])
        self.check_model(str(body["model"]["id"]))
        body["version"] = int(current.body["version"]) + 1
        body["updated_at"] = now_rfc3339()
        expected = req.version if req.version is not None else int(current.body["version"])
        await self.store.put_agent_version(
            Resource(kind="agent", id=agent_id, body=body, created_at=current.created_at),
            expected_version=expected,
        )
        return body

    async def archive(self, agent_id: str) -> dict[str, Any]:
        """Mark archived (no delete exists for agents)."""
        current = await self.store.get_resource("agent", agent_id)
        if current is None:
            raise NotFound(f"agent {agent_id} not found")
        body = dict(current.body)
        if body.get("archived_at") is None:
            body["archived_at"] = body["updated_at"] = now_rfc3339()
            await self.store.replace_resource(
                Resource(
                    kind="agent",
                    id=agent_id,
                    body=body,
                    created_at=current.created_at,
                    archived_at=body["archived_at"],
                )
            )
        return body

    async def list(self, page: Page) -> dict[str, Any]:
        """A page of latest versions."""
        rows = await self.store.list_resources("agent", page)
        return page_envelope(rows, page.limit, lambda r: r.body, lambda r: r.id)

    async def versions(
        self, agent_id: str, limit: int | None, cursor: str | None
    ) -> dict[str, Any]:
        """A page of every version."""
        await self.get(agent_id)
        if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) < 10):
            raise BadRequest("page: invalid cursor")
        page = Page(limit=check_limit(limit, default=20, maximum=100), after_id=cursor)
        rows = await self.store.list_agent_versions(agent_id, page)
        return page_envelope(rows, page.limit, lambda r: r.body, lambda r: str(r.body["version"]))


def _identity(value: Any) -> dict[str, Any]:
    if value is None:
        return {"type": "service_account"}
    if value.type == "aws_role" and not value.role_arn:
        raise BadRequest("execution_identity.role_arn: required for aws_role")
    return dict(value.model_dump(exclude_none=True))


def _apply_update(
    body: dict[str, Any], req: AgentUpdate, providers: frozenset[str]
) -> dict[str, Any]:
    sent = req.model_fields_set
    if "name" in sent:
        if req.name is None:
            raise BadRequest("name: cannot be cleared")
        body["name"] = req.name
    if "model" in sent:
        if req.model is None:
            raise BadRequest("model: cannot be cleared")
        body["model"] = model_config(req.model, body.get("model"))
    for field in ("system", "description"):
        if field in sent:
            body[field] = getattr(req, field) or None
    if "tools" in sent or "mcp_servers" in sent:
        body["tools"], body["mcp_servers"] = _updated_tools(
            body, req.tools, req.mcp_servers, sent, providers
        )
    if "multiagent" in sent:
        body["multiagent"] = req.multiagent
    if "execution_identity" in sent:
        body["execution_identity"] = _identity(req.execution_identity)
    if "metadata" in sent:
        body["metadata"] = apply_metadata_patch(body.get("metadata", {}), req.metadata)
    return body


def _updated_tools(
    body: dict[str, Any], tools: Any, mcp: Any, sent: set[str], providers: frozenset[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if "tools" not in sent:
        # Stored entries are resolved; run them back through the request model so that
        # resolution (and its name checks against the new MCP servers) sees one shape.
        stored = {"name": "x", "model": "x", "tools": _unresolve(body.get("tools", []))}
        tools = AgentCreate.model_validate(stored).tools
    if "mcp_servers" not in sent:
        mcp = [McpServer.model_validate(m) for m in body.get("mcp_servers", [])]
    server_list = list(mcp or [])
    resolved = resolve_tools(list(tools or []), server_list, providers)
    return resolved, [s.model_dump() for s in server_list]


def _unresolve_multiagent(value: dict[str, Any]) -> dict[str, Any]:
    """A stored (resolved) multiagent back in request form, to check it again."""
    if value.get("type") == "coordinator":
        return value
    sub = value.get("subagents") or {}
    out = {"type": value["type"], "subagents": sub}
    return out


def _unresolve(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored (resolved) tool entries back into request form."""
    out = []
    for tool in tools:
        if tool.get("type") == "agent_toolset_20260401":
            out.append(
                {
                    "type": tool["type"],
                    "default_config": tool["default_config"],
                    "configs": [
                        {k: v for k, v in c.items() if k != "type"} for c in tool["configs"]
                    ],
                }
            )
        else:
            out.append(tool)
    return out
