"""An agent's `multiagent` configuration: checked and resolved at save time, expanded into
thread-agent snapshots at session creation (docs/threads.md).

What this build cannot run is a 400 naming the field, never a session that fails later:
advisors, inline agents, workflows, `{type: "self"}` entries and roster agents with skills
(a thread shares its session's sandbox, whose skill mounts are the coordinator's).
"""

from __future__ import annotations

from typing import Any

from corral.errors import BadRequest
from corral.session.threads import THREAD_TOOLS
from corral.store.base import Resource, Store

MAX_ROSTER = 20
_THREAD_AGENT_KEYS = (
    "id",
    "version",
    "name",
    "description",
    "system",
    "model",
    "tools",
    "mcp_servers",
    "skills",
    "execution_identity",
)


async def resolve_multiagent(
    store: Store, value: Any, tools: list[dict[str, Any]], self_id: str | None = None
) -> dict[str, Any] | None:
    """The stored form of a request's `multiagent` (roster versions pinned); `self_id` is
    the agent being updated (it may not be in its own roster)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("multiagent: must be an object or null")
    for tool in tools:
        if tool.get("type") == "custom" and tool.get("name") in THREAD_TOOLS:
            raise BadRequest(
                f"tools: the name {tool['name']!r} is reserved for a coordinator's thread tools"
            )
    kind = value.get("type")
    if kind == "coordinator":
        _only(value, {"type", "agents"}, "multiagent")
        entries = value.get("agents")
        agents = await _roster(store, entries, "multiagent.agents", self_id)
        return {"type": "coordinator", "agents": agents}
    if kind == "multiagent_20261001":
        _only(value, {"type", "advisor", "subagents", "workflows"}, "multiagent")
        if (value.get("advisor") or {}).get("type", "disabled") != "disabled":
            raise BadRequest("multiagent.advisor: advisors are not supported by this server")
        if (value.get("workflows") or {}).get("type", "disabled") != "disabled":
            raise BadRequest("multiagent.workflows: workflows are not supported by this server")
        sub = value.get("subagents") or {"type": "enabled"}
        if not isinstance(sub, dict) or sub.get("type") not in ("enabled", "disabled"):
            raise BadRequest("multiagent.subagents: must be {type: enabled|disabled}")
        disabled = {"type": "disabled"}
        resolved: dict[str, Any] = {
            "type": kind,
            "advisor": disabled,
            "workflows": disabled,
            "subagents": disabled,
        }
        if sub["type"] == "enabled":
            _only(sub, {"type", "inline_agents", "predefined_agents"}, "multiagent.subagents")
            inline = (sub.get("inline_agents") or disabled).get("type")
            if inline != "disabled":
                raise BadRequest(
                    "multiagent.subagents.inline_agents: inline agents are not supported by "
                    "this server; send {type: disabled} and list predefined_agents"
                )
            where = "multiagent.subagents.predefined_agents"
            agents = await _roster(store, sub.get("predefined_agents"), where, self_id)
            resolved["subagents"] = {
                "type": "enabled",
                "inline_agents": disabled,
                "predefined_agents": agents,
            }
        return resolved
    raise BadRequest("multiagent.type: must be 'coordinator' or 'multiagent_20261001'")


def _only(value: dict[str, Any], allowed: set[str], where: str) -> None:
    for key in value:
        if key not in allowed:
            raise BadRequest(f"{where}.{key}: unknown field")


async def _roster(
    store: Store, entries: Any, where: str, self_id: str | None
) -> list[dict[str, Any]]:
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ROSTER:
        raise BadRequest(f"{where}: must list 1 to {MAX_ROSTER} agents")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        at = f"{where}[{index}]"
        if isinstance(entry, str):
            entry = {"type": "agent", "id": entry}
        if not isinstance(entry, dict):
            raise BadRequest(f"{at}: must be an agent id or an object")
        if entry.get("type") != "agent":
            raise BadRequest(
                f"{at}.type: only {{type: agent}} entries are supported by this server "
                f"(not {entry.get('type')!r})"
            )
        found = await _entry_agent(store, entry, at)
        agent_id = found.id
        if agent_id == self_id:
            raise BadRequest(f"{at}: an agent cannot be in its own roster")
        if found.archived_at is not None or found.body.get("archived_at"):
            raise BadRequest(f"{at}: agent {agent_id} is archived", error_code="agent_archived")
        if found.body.get("multiagent"):
            raise BadRequest(
                f"{at}: agent {agent_id} is itself multiagent; threads are one level deep"
            )
        if found.body.get("skills"):
            raise BadRequest(
                f"{at}: agent {agent_id} has skills; roster agents with skills are not "
                "supported by this server (threads share the coordinator's sandbox)"
            )
        if agent_id in seen:
            raise BadRequest(f"{at}: agent {agent_id} is listed twice")
        names = {o["name"] for o in out if "name" in o}
        if found.body.get("name") in names:
            raise BadRequest(f"{at}: two roster agents are named {found.body.get('name')!r}")
        seen.add(agent_id)
        out.append({"type": "agent", "id": agent_id, "version": int(found.body["version"])})
    return out


async def _entry_agent(store: Store, entry: dict[str, Any], at: str) -> Resource:
    agent_id, version = entry.get("id"), entry.get("version")
    if not isinstance(agent_id, str):
        raise BadRequest(f"{at}.id: required")
    if version is not None and not isinstance(version, int):
        raise BadRequest(f"{at}.version: must be an integer")
    found = (
        await store.get_resource("agent", agent_id)
        if version is None
        else await store.get_agent_version(agent_id, version)
    )
    if found is None:
        raise BadRequest(f"{at}: agent {agent_id} not found", error_code="agent_not_found")
    return found


async def expand_roster(store: Store, multiagent: dict[str, Any] | None) -> dict[str, Any] | None:
    """A session's `agent.multiagent`: roster entries as full thread-agent snapshots."""
    if not multiagent:
        return multiagent
    expanded = dict(multiagent)
    if multiagent.get("type") == "coordinator":
        expanded["agents"] = [await _snapshot(store, e) for e in multiagent["agents"]]
    elif (multiagent.get("subagents") or {}).get("type") == "enabled":
        sub = dict(multiagent["subagents"])
        sub["predefined_agents"] = [await _snapshot(store, e) for e in sub["predefined_agents"]]
        expanded["subagents"] = sub
    return expanded


async def _snapshot(store: Store, entry: dict[str, Any]) -> dict[str, Any]:
    found = await store.get_agent_version(str(entry["id"]), int(entry["version"]))
    if found is None:
        raise BadRequest(
            f"agent.multiagent: roster agent {entry['id']} version {entry['version']} is gone"
        )
    return {"type": "agent", **{k: found.body.get(k) for k in _THREAD_AGENT_KEYS}}
