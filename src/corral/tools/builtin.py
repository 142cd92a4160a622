"""Definitions of the `agent_toolset_20260401` tools as the model sees them (no I/O here).

Input shapes follow the SDK's `BetaManagedAgentsAgentToolset20260401*Input` types; behaviour
(messages, limits) is implemented by the hands (`corral.hands`), not in this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TOOLSET_TYPE = "agent_toolset_20260401"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """One tool definition: what the model is told, and where the call is served."""

    name: str
    description: str
    input_schema: dict[str, Any] = field(default_factory=dict)

    def to_api(self) -> dict[str, Any]:
        """The Messages API tool definition `{name, description, input_schema}`."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


def _schema(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def _prop(type_: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": type_, "description": description, **extra}


_PATH_HINT = "Relative paths are resolved against /workspace, the session's working directory."

BASH = ToolSpec(
    name="bash",
    description=(
        "Run a command in a persistent bash shell inside the session's sandbox. The shell starts "
        "in /workspace; the working directory, exported variables and functions persist between "
        "calls. Stdin is empty. stdout and stderr are returned together, truncated in the middle "
        "beyond the output limit (100 KiB by default). A non-zero exit status is reported as an "
        "error. Commands time out after 120 seconds unless `timeout_ms` asks for less; a command "
        "that times out is killed. Use `restart: true` (without `command`) to start a fresh "
        "shell, which also kills background processes."
    ),
    input_schema=_schema(
        [],
        command=_prop("string", "Shell command to execute. Omit only with restart."),
        restart=_prop("boolean", "Restart the persistent shell instead of running a command."),
        timeout_ms=_prop(
            "integer", "Per-call timeout in milliseconds; 0 or omitted uses the default."
        ),
    ),
)

READ = ToolSpec(
    name="read",
    description=(
        "Read a text file (UTF-8, up to 256 KiB; use `view_range` for parts of larger files), "
        "or an image (png, jpg, gif, webp) or PDF, which is returned as an image/document. "
        + _PATH_HINT
    ),
    input_schema=_schema(
        ["file_path"],
        file_path=_prop("string", "Path of the file to read."),
        view_range=_prop(
            "array",
            "Optional [start_line, end_line], 1-based and inclusive; end_line <= 0 means "
            "end of file.",
            items={"type": "integer"},
            minItems=2,
            maxItems=2,
        ),
    ),
)

WRITE = ToolSpec(
    name="write",
    description=(
        "Write a file with the given content, replacing it if it exists and creating parent "
        "directories as needed. " + _PATH_HINT
    ),
    input_schema=_schema(
        ["file_path", "content"],
        file_path=_prop("string", "Path of the file to write."),
        content=_prop("string", "Full file contents to write."),
    ),
)

EDIT = ToolSpec(
    name="edit",
    description=(
        "Replace text in a file by exact string match. `old_string` must occur exactly once "
        "unless `replace_all` is true. " + _PATH_HINT
    ),
    input_schema=_schema(
        ["file_path", "old_string", "new_string"],
        file_path=_prop("string", "Path of the file to edit."),
        old_string=_prop("string", "Exact text to find."),
        new_string=_prop("string", "Replacement text."),
        replace_all=_prop(
            "boolean", "Replace every occurrence instead of requiring a unique match."
        ),
    ),
)

GLOB = ToolSpec(
    name="glob",
    description=(
        "List paths matching a glob pattern such as `**/*.py` (`**` matches any number of "
        "directories), newest first, at most 200. The pattern must be relative; `path` sets "
        "the directory to search (default /workspace)."
    ),
    input_schema=_schema(
        ["pattern"],
        pattern={"type": "string", "description": "Glob pattern, e.g. `**/*.go`."},
        path={
            "type": "string",
            "description": "Directory to search under; defaults to /workspace.",
        },
    ),
)

GREP = ToolSpec(
    name="grep",
    description=(
        "Search file contents for a regular expression (Python syntax). Returns "
        "`path:line:text` for each matching line, skipping binary files, symlinks, .git and "
        "node_modules; output is capped at 100 KiB. `path` may be a file or a directory "
        "(default /workspace)."
    ),
    input_schema=_schema(
        ["pattern"],
        pattern={"type": "string", "description": "Regular expression to search for."},
        path={
            "type": "string",
            "description": "File or directory to search; defaults to /workspace.",
        },
    ),
)

WEB_FETCH = ToolSpec(
    name="web_fetch",
    description=(
        "Fetch a web page or other text resource with an HTTP(S) GET and return its content. "
        "HTML is converted to readable text (headings, lists, links as [text](url)); plain "
        "text, JSON and XML are returned as is; other content types (images, PDFs, archives) "
        "are refused. Follows up to 5 redirects, gives up after 30 seconds, reads at most "
        "2 MiB and returns at most 100 KiB of text (less with `max_content_tokens`). Requests "
        "go through the environment's network policy: hosts it does not allow are refused "
        "with the reason. Use bash (e.g. curl) for other methods, headers or downloads."
    ),
    input_schema=_schema(
        ["url"],
        url=_prop("string", "Absolute http:// or https:// URL to fetch."),
        max_content_tokens=_prop(
            "integer",
            "Optional cap on the returned content, in tokens (about 4 characters each); "
            "longer content is truncated with a note.",
        ),
    ),
)

WEB_SEARCH = ToolSpec(
    name="web_search",
    description=(
        "Search the web. Returns JSON: the query and the top results in rank order, each "
        "with title, url, snippet and, when known, page_age. Results may be limited to or "
        "exclude certain domains by this agent's configuration, and the number of searches "
        "per turn may be capped. Read a result's full page with web_fetch."
    ),
    input_schema=_schema(["query"], query=_prop("string", "The search query.")),
)
"""Served on the server by the operator's provider (`corral.tools.web_search`), not by hands."""

BUILTIN_TOOLS: dict[str, ToolSpec] = {
    spec.name: spec for spec in (BASH, READ, WRITE, EDIT, GLOB, GREP, WEB_FETCH, WEB_SEARCH)
}
SANDBOX_TOOLS: frozenset[str] = frozenset(
    {"bash", "read", "write", "edit", "glob", "grep", "web_fetch"}
)
"""The tools `Hands` execute inside a sandbox (web_fetch too: it leaves through the egress
proxy like any other traffic, so it obeys the environment's networking)."""
