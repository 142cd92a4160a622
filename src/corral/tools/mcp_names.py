"""The names MCP tools are offered to the model under: `mcp__<server>__<tool>`.

A model sees one flat list of tool names, so an MCP tool's name must never collide with a
built-in tool, a custom tool, or another server's tool. Built-in names never start with
`mcp__` and custom tools may not (a 400 at agent save time), so the prefix keeps the three
kinds apart. Within the prefix the name is a pure function of (server name, tool name), so the
transcript of an old call renders the same name a later request offers:

- `mcp__<server>__<tool>` when both parts are already valid (`[A-Za-z0-9_-]`), the server
  part holds no `__` and neither starts nor ends with `_` (so the split is unambiguous), and
  the whole fits in 64 characters (the tightest limit among the model APIs Corral speaks);
- otherwise invalid characters become `_`, the result is cut to 55 characters, and `_` plus
  8 hex digits of SHA-256 over the exact (server, tool) pair are appended, so two pairs that
  sanitise alike still get different names.
"""

from __future__ import annotations

import hashlib
import re

MCP_PREFIX = "mcp__"
MAX_NAME = 64
_INVALID = re.compile(r"[^A-Za-z0-9_-]")
_PLAIN_SERVER = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")
_PLAIN_TOOL = re.compile(r"[A-Za-z0-9_-]+")
_DIGEST = 8


def mcp_tool_name(server: str, tool: str) -> str:
    """The model-facing name of `tool` on the agent's MCP server named `server`."""
    plain = f"{MCP_PREFIX}{server}__{tool}"
    if _PLAIN_SERVER.fullmatch(server) and _PLAIN_TOOL.fullmatch(tool) and len(plain) <= MAX_NAME:
        return plain
    cleaned = f"{MCP_PREFIX}{_INVALID.sub('_', server)}__{_INVALID.sub('_', tool)}"
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:_DIGEST]
    return f"{cleaned[: MAX_NAME - _DIGEST - 1]}_{digest}"


def is_mcp_name(name: str) -> bool:
    """Whether `name` is in the namespace reserved for MCP tools."""
    return name.startswith(MCP_PREFIX)
