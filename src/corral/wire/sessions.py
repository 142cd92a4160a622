"""Session request bodies."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from corral.wire.agents import CustomTool, McpServer, ModelConfig, SkillRef, Tool
from corral.wire.common import Metadata, MetadataPatch, NonEmpty, Strict
from corral.wire.events import InitialEvent

__all__ = ["CustomTool"]


class AgentRef(Strict):
    """`{type: "agent", id, version?}`."""

    type: Literal["agent"]
    id: NonEmpty
    version: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None


class AgentWithOverrides(Strict):
    """An agent version with per-session replacements."""

    type: Literal["agent_with_overrides"]
    id: NonEmpty
    version: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    model: NonEmpty | ModelConfig | None = None
    system: Annotated[str, Field(max_length=100_000)] | None = None
    tools: list[Tool] | None = None
    mcp_servers: list[McpServer] | None = None
    skills: list[SkillRef] | None = None


AgentParam = Annotated[AgentRef | AgentWithOverrides, Field(discriminator="type")]


class FileResource(Strict):
    """A file mounted read-only."""

    type: Literal["file"]
    file_id: NonEmpty
    mount_path: str | None = None


class GithubRepository(Strict):
    """A repository cloned into the workspace."""

    type: Literal["github_repository"]
    url: NonEmpty
    authorization_token: str | None = None
    checkout: dict[str, Any] | None = None
    mount_path: str | None = None


class ResourceUpdate(Strict):
    """POST /v1/sessions/{id}/resources/{resource_id}: token rotation."""

    authorization_token: str


class MemoryStoreResource(Strict):
    """A memory store mounted at /mnt/memory/<slug>."""

    type: Literal["memory_store"]
    memory_store_id: NonEmpty
    access: Literal["read_write", "read_only"] | None = None
    instructions: Annotated[str, Field(max_length=4096)] | None = None


ResourceParam = Annotated[
    FileResource | GithubRepository | MemoryStoreResource, Field(discriminator="type")
]


class SessionCreate(Strict):
    """POST /v1/sessions."""

    agent: NonEmpty | AgentParam
    environment_id: NonEmpty
    resources: list[ResourceParam] | None = None
    vault_ids: list[NonEmpty] | None = None
    initial_events: Annotated[list[InitialEvent], Field(max_length=50)] | None = None
    title: str | None = None
    metadata: Metadata | None = None
    budget: dict[str, Any] | None = None


class SessionAgentUpdate(Strict):
    """Only tools and MCP servers of a session's agent are updatable."""

    tools: list[Tool] | None = None
    mcp_servers: list[McpServer] | None = None


class SessionUpdate(Strict):
    """POST /v1/sessions/{id}."""

    title: str | None = None
    metadata: MetadataPatch | None = None
    agent: SessionAgentUpdate | None = None
    budget: dict[str, Any] | None = None
    vault_ids: list[str] | None = None
