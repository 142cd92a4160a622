"""Agent request bodies: create/update, tools, MCP servers, skills, model config."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from corral.wire.common import Metadata, MetadataPatch, NonEmpty, PermissionPolicy, Strict

BUILTIN_TOOL_NAMES = ("bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search")
EffortName = Literal["low", "medium", "high", "xhigh", "max"]


class EffortObject(Strict):
    """`{type: <effort>}` form."""

    type: EffortName


class ModelConfig(Strict):
    """`model` as an object."""

    id: NonEmpty
    effort: EffortName | EffortObject | None = None
    inference_geo: str | None = None
    speed: Literal["standard", "fast"] | None = None


class ToolsetDefaultConfig(Strict):
    """Applies to every tool in a toolset."""

    enabled: bool | None = None
    permission_policy: PermissionPolicy | None = None


class BuiltinToolConfig(Strict):
    """Per-tool override inside `agent_toolset_20260401.configs`."""

    model_config = Strict.model_config | {"extra": "allow"}
    name: Literal["bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search"]
    type: str | None = None
    enabled: bool | None = None
    permission_policy: PermissionPolicy | None = None


class AgentToolset(Strict):
    """The built-in toolset."""

    type: Literal["agent_toolset_20260401"]
    default_config: ToolsetDefaultConfig | None = None
    configs: list[BuiltinToolConfig] | None = None

    @field_validator("configs")
    @classmethod
    def _unique(cls, value: list[BuiltinToolConfig] | None) -> list[BuiltinToolConfig] | None:
        names = [c.name for c in value or []]
        if len(names) != len(set(names)):
            raise ValueError("each tool may be configured once")
        return value


class McpToolConfig(Strict):
    """Per-tool override inside an `mcp_toolset`."""

    name: Annotated[str, Field(min_length=1, max_length=128)]
    enabled: bool | None = None
    permission_policy: PermissionPolicy | None = None


class McpToolset(Strict):
    """Tools of one MCP server."""

    type: Literal["mcp_toolset"]
    mcp_server_name: NonEmpty
    default_config: ToolsetDefaultConfig | None = None
    configs: list[McpToolConfig] | None = None


class CustomTool(Strict):
    """A tool the client executes."""

    type: Literal["custom"]
    name: Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
    description: NonEmpty
    input_schema: dict[str, Any]

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('input_schema.type must be "object"')
        if not isinstance(value.get("properties", {}), dict):
            raise ValueError("input_schema.properties must be an object")
        required = value.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError("input_schema.required must be a list of strings")
        return value


Tool = Annotated[AgentToolset | McpToolset | CustomTool, Field(discriminator="type")]


class McpServer(Strict):
    """`{type: "url", name, url}`."""

    type: Literal["url"]
    name: Annotated[str, Field(min_length=1, max_length=255)]
    url: Annotated[str, Field(min_length=1, pattern=r"^https?://")]


class SkillRef(Strict):
    """A skill attached to an agent."""

    type: Literal["anthropic", "custom"]
    skill_id: NonEmpty
    version: str | None = None


class ExecutionIdentity(Strict):
    """Who runs the agent (stored and echoed)."""

    type: Literal["service_account", "aws_role"]
    role_arn: str | None = None


class AgentCreate(Strict):
    """POST /v1/agents."""

    name: Annotated[str, Field(min_length=1, max_length=256)]
    model: NonEmpty | ModelConfig
    system: Annotated[str, Field(max_length=100_000)] | None = None
    description: Annotated[str, Field(max_length=2048)] | None = None
    tools: Annotated[list[Tool], Field(max_length=256)] | None = None
    mcp_servers: Annotated[list[McpServer], Field(max_length=20)] | None = None
    skills: list[SkillRef] | None = None
    multiagent: dict[str, Any] | None = None
    metadata: Metadata | None = None
    execution_identity: ExecutionIdentity | None = None


class AgentUpdate(Strict):
    """POST /v1/agents/{id}: omitted fields are kept."""

    version: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    name: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    model: NonEmpty | ModelConfig | None = None
    system: Annotated[str, Field(max_length=100_000)] | None = None
    description: Annotated[str, Field(max_length=2048)] | None = None
    tools: Annotated[list[Tool], Field(max_length=256)] | None = None
    mcp_servers: Annotated[list[McpServer], Field(max_length=20)] | None = None
    skills: list[SkillRef] | None = None
    multiagent: dict[str, Any] | None = None
    metadata: MetadataPatch | None = None
    execution_identity: ExecutionIdentity | None = None
