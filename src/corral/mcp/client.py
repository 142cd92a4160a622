"""The brain's MCP client: one short connection per operation, over the official `mcp` SDK.

Transport. An agent's `mcp_servers` entry has only a `url` (the SDK's `type: "url"`), so the
transport is chosen from it: a URL whose path ends in `/sse` is spoken to with the older
HTTP+SSE transport; any other with streamable HTTP, falling back to HTTP+SSE when the server
answers `initialize` with a 4xx other than 401/403 (a 404 or 405 is what an SSE-only server
gives a streamable POST).

Every connection is made by `corral.outbound.guarded_client` (the server's egress address
rules) with `VaultAuth` (the session's vault credential for the server's URL), and every
operation has a deadline, so a dead or silent server is an `McpFailure`, never a hang.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx

from corral.mcp.auth import AuthLog, AuthRejected, HttpCapture, RefreshOutcome, VaultAuth
from corral.netpolicy import AddressPolicy
from corral.outbound import OutboundRefused, guarded_client
from corral.vault.secrets import ResolvedSecret, SecretMatch, SecretResolver

# The `mcp` SDK is imported where a connection is made: importing it (it pulls in its server
# side too) costs every server process CPU at start, and most agents have no MCP server.
if TYPE_CHECKING:
    from mcp import ClientSession
    from mcp.types import CallToolResult

T = TypeVar("T")
FailureKind = Literal["connection", "authentication"]
_MAX_TOOLS = 500
_MAX_RESULT_CHARS = 100 * 1024
_READ_TIMEOUT = 300.0
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


@dataclass(frozen=True, slots=True)
class ServerRef:
    """One of an agent's `mcp_servers`."""

    name: str
    url: str


@dataclass(frozen=True, slots=True)
class McpTool:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """A tool call's result as content blocks the Managed Agents API carries."""

    content: list[dict[str, Any]]
    is_error: bool


class McpFailure(Exception):
    """The server could not be used; `message` is safe to log and show (no secret)."""

    def __init__(
        self,
        kind: FailureKind,
        server: str,
        message: str,
        *,
        method: str = "initialize",
        http: HttpCapture | None = None,
        refresh: RefreshOutcome | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.server = server
        self.message = message
        self.method = method
        self.http = http
        self.refresh = refresh

    @property
    def error_type(self) -> str:
        """The `session.error` type this failure is reported as."""
        if self.kind == "authentication":
            return "mcp_authentication_failed_error"
        return "mcp_connection_failed_error"


@dataclass(slots=True)
class _Progress:
    method: str = "initialize"
    initialized: bool = False
    auth_log: AuthLog = field(default_factory=AuthLog)


def same_server_url(a: str, b: str) -> bool:
    """Whether two MCP server URLs are the same (a trailing slash is ignored)."""
    return a.rstrip("/") == b.rstrip("/")


class McpClient:
    """Discovers and calls tools on MCP servers for sessions, with vault credentials."""

    def __init__(
        self,
        resolver: SecretResolver,
        policy: AddressPolicy,
        *,
        connect_timeout: float = 20.0,
        call_timeout: float = 300.0,
    ) -> None:
        self.resolver = resolver
        self.policy = policy
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout

    async def credential_for(self, vault_ids: Sequence[str], url: str) -> ResolvedSecret | None:
        """The first credential (in `vault_ids` order) whose `mcp_server_url` is `url`,
        trailing slash ignored."""
        forms = dict.fromkeys([url, url.rstrip("/"), url.rstrip("/") + "/"])
        for vault_id in dict.fromkeys(vault_ids):
            for form in forms:
                found = await self.resolver.resolve_secret(
                    [vault_id], SecretMatch(mcp_server_url=form)
                )
                if found is not None and found.auth.get("type") in ("static_bearer", "mcp_oauth"):
                    return found
        return None

    async def list_tools(self, server: ServerRef, vault_ids: Sequence[str]) -> list[McpTool]:
        """`tools/list` (every page, up to 500 tools)."""
        found = await self.credential_for(vault_ids, server.url)
        return await self._operate(server, found, _list_tools, timeout=self.connect_timeout)

    async def call_tool(
        self, server: ServerRef, vault_ids: Sequence[str], tool: str, arguments: dict[str, Any]
    ) -> CallOutcome:
        """`tools/call`; a JSON-RPC error from the server is an error result, not a failure."""
        found = await self.credential_for(vault_ids, server.url)

        async def call(session: ClientSession, progress: _Progress) -> CallOutcome:
            from mcp.shared.exceptions import McpError

            progress.method = "tools/call"
            try:
                result = await session.call_tool(
                    tool, arguments, read_timeout_seconds=timedelta(seconds=self.call_timeout)
                )
            except McpError as exc:
                text = f"MCP server '{server.name}' returned an error: {exc.error.message}"
                return CallOutcome([{"type": "text", "text": text}], is_error=True)
            return convert_result(result)

        return await self._operate(server, found, call, timeout=self.call_timeout)

    async def probe(self, server: ServerRef, found: ResolvedSecret) -> AuthLog:
        """initialize + tools/list with `found` (refreshing as needed): what the requests saw.

        Raises:
            McpFailure: the probe failed; `method`, `http` and `refresh` say where and how.
        """
        log: list[AuthLog] = []

        async def listing(session: ClientSession, progress: _Progress) -> None:
            await _list_tools(session, progress)
            log.append(progress.auth_log)

        await self._operate(server, found, listing, timeout=self.connect_timeout)
        return log[0]

    async def _operate(
        self,
        server: ServerRef,
        found: ResolvedSecret | None,
        op: Callable[[ClientSession, _Progress], Awaitable[T]],
        *,
        timeout: float,
    ) -> T:
        kinds = (
            ["sse"] if urlsplit(server.url).path.rstrip("/").endswith("/sse") else ["http", "sse"]
        )
        for kind in kinds:
            progress = _Progress()
            auth = VaultAuth(found, self.resolver, self._client_factory())
            progress.auth_log = auth.log
            try:
                return await self._attempt(kind, server, auth, op, progress, timeout)
            except Exception as exc:  # exception groups from the transports' task groups
                failure = classify(exc, server, progress, auth, self.connect_timeout)
                if kind == "http" and _falls_back(failure, progress):
                    continue
                raise failure from None
        raise AssertionError("unreachable: the last transport either returns or raises")

    async def _attempt(
        self,
        kind: str,
        server: ServerRef,
        auth: VaultAuth,
        op: Callable[[ClientSession, _Progress], Awaitable[T]],
        progress: _Progress,
        timeout: float,
    ) -> T:
        from mcp import ClientSession

        read_timeout = timedelta(seconds=self.connect_timeout)
        with anyio.fail_after(self.connect_timeout) as scope:
            async with (
                self._transport(kind, server.url, auth) as (read, write),
                ClientSession(read, write, read_timeout_seconds=read_timeout) as session,
            ):
                await session.initialize()
                progress.initialized = True
                progress.method = "tools/list"
                scope.deadline = anyio.current_time() + timeout
                return await op(session, progress)

    @asynccontextmanager
    async def _transport(
        self, kind: str, url: str, vault_auth: VaultAuth
    ) -> AsyncIterator[tuple[Any, Any]]:
        from mcp.client.sse import sse_client
        from mcp.client.streamable_http import streamable_http_client

        if kind == "sse":

            def factory(
                headers: dict[str, str] | None = None,
                timeout: httpx.Timeout | None = None,
                auth: httpx.Auth | None = None,
            ) -> httpx.AsyncClient:
                return self._client(vault_auth, headers=headers)  # ours, not the SDK's auth

            async with sse_client(
                url, timeout=self.connect_timeout, httpx_client_factory=factory
            ) as (read, write):
                yield read, write
            return
        async with (
            self._client(vault_auth) as client,
            streamable_http_client(url, http_client=client) as (read, write, _),
        ):
            yield read, write

    def _client(self, auth: VaultAuth, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
        timeout = httpx.Timeout(self.connect_timeout, read=_READ_TIMEOUT)
        return guarded_client(self.policy, auth=auth, headers=headers, timeout=timeout)

    def _client_factory(self) -> Callable[..., httpx.AsyncClient]:
        def factory(**kwargs: Any) -> httpx.AsyncClient:
            return guarded_client(self.policy, **kwargs)

        return factory


async def _list_tools(session: ClientSession, progress: _Progress) -> list[McpTool]:
    progress.method = "tools/list"
    tools: list[McpTool] = []
    cursor: str | None = None
    while len(tools) < _MAX_TOOLS:
        page = await session.list_tools(cursor)
        for tool in page.tools:
            schema = dict(tool.inputSchema or {})
            if schema.get("type") != "object":
                schema = {"type": "object", "properties": {}}
            tools.append(McpTool(tool.name, tool.description or tool.title or "", schema))
        cursor = page.nextCursor
        if not cursor:
            break
    return tools[:_MAX_TOOLS]


def classify(
    exc: BaseException,
    server: ServerRef,
    progress: _Progress,
    auth: VaultAuth,
    connect_timeout: float,
) -> McpFailure:
    """One `McpFailure` for whatever a connection attempt raised (groups flattened)."""
    leaves = list(_leaves(exc))
    where = f"MCP server '{server.name}' ({server.url})"
    log = auth.log
    common: dict[str, Any] = {"method": progress.method, "refresh": log.refresh}
    for leaf in leaves:
        if isinstance(leaf, AuthRejected):
            return McpFailure("authentication", server.name, f"{where}: {leaf}", **common)
    if log.rejected is not None:
        status = log.rejected.status_code
        hint = (
            "no credential for this URL in the session's vaults"
            if auth.found is None
            else ("the credential was refused")
        )
        return McpFailure(
            "authentication",
            server.name,
            f"{where} answered HTTP {status} ({hint})",
            http=log.rejected,
            **common,
        )
    for leaf in leaves:
        if isinstance(leaf, OutboundRefused):
            msg = f"{where}: {leaf} (see [egress] allow_private in docs/mcp.md)"
            return McpFailure("connection", server.name, msg, **common)
    for leaf in leaves:
        if isinstance(leaf, TimeoutError):
            msg = f"{where} did not answer {progress.method} in time"
            return McpFailure("connection", server.name, msg, **common)
    for leaf in leaves:
        if isinstance(leaf, httpx.HTTPStatusError):
            status = leaf.response.status_code
            msg = f"{where} answered {progress.method} with HTTP {status}"
            return McpFailure("connection", server.name, msg, http=log.last_error, **common)
    detail = "; ".join(f"{type(e).__name__}: {e}" for e in leaves)[:500] or type(exc).__name__
    if log.last_error is not None:
        detail = f"HTTP {log.last_error.status_code}; {detail}"
    return McpFailure(
        "connection",
        server.name,
        f"{where} could not be used: {detail}",
        http=log.last_error,
        **common,
    )


def _falls_back(failure: McpFailure, progress: _Progress) -> bool:
    """Whether a streamable HTTP failure at initialize suggests an HTTP+SSE server."""
    if progress.initialized or failure.kind != "connection" or failure.http is None:
        return False
    return 400 <= failure.http.status_code < 500


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def convert_result(result: CallToolResult) -> CallOutcome:
    """MCP content as Managed Agents content blocks (text and images; the rest as text)."""
    blocks: list[dict[str, Any]] = []
    budget = _MAX_RESULT_CHARS
    for item in result.content:
        block = _block(item)
        if block.get("type") == "text":
            text = str(block["text"])
            if len(text) > budget:
                text = text[:budget] + "\n[truncated: the tool's output exceeded 100 KiB]"
            budget = max(budget - len(text), 0)
            block = {"type": "text", "text": text}
        blocks.append(block)
    if not blocks and result.structuredContent is not None:
        text = json.dumps(result.structuredContent)[:_MAX_RESULT_CHARS]
        blocks.append({"type": "text", "text": text})
    if not blocks:
        blocks.append({"type": "text", "text": "(no output)"})
    return CallOutcome(blocks, is_error=bool(result.isError))


def _block(item: Any) -> dict[str, Any]:
    from mcp.types import (
        AudioContent,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    if isinstance(item, TextContent):
        return {"type": "text", "text": item.text}
    if isinstance(item, ImageContent) and item.mimeType in _IMAGE_TYPES:
        source = {"type": "base64", "media_type": item.mimeType, "data": item.data}
        return {"type": "image", "source": source}
    if isinstance(item, EmbeddedResource) and isinstance(item.resource, TextResourceContents):
        return {"type": "text", "text": item.resource.text}
    if isinstance(item, ResourceLink):
        return {"type": "text", "text": f"[resource {item.name}: {item.uri}]"}
    if isinstance(item, AudioContent):
        return {"type": "text", "text": f"[audio content ({item.mimeType}) omitted]"}
    return {"type": "text", "text": f"[{getattr(item, 'type', 'unknown')} content omitted]"}
