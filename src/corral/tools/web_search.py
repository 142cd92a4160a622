"""The `web_search` tool: one operator-configured provider, Corral's own domain filter, and
the result text the model reads.

Searches run on the server (never in a sandbox) through `corral.outbound.guarded_client`, so
a provider URL obeys the same address rules as everything else the server fetches. Any
failure (refused address, HTTP error, timeout, malformed answer) becomes an error result
with a message for the model; nothing here raises to the brain.

The result is one text block holding JSON (see docs/web_search.md):
`{"query": ..., "results": [{"title", "url", "snippet", "page_age"?}, ...]}` — the fields of
the hosted tool's `web_search_result` blocks, with the snippet in clear where the hosted API
puts encrypted content.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx

from corral.netpolicy import AddressPolicy
from corral.outbound import OutboundRefused, guarded_client
from corral.web_search_config import WebSearchConfig

MAX_QUERY_CHARS = 1000
_SNIPPET_CHARS = 600
_TITLE_CHARS = 300
_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
_TAG = re.compile(r"<[^>]{0,500}>")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One result as the model sees it."""

    title: str
    url: str
    snippet: str
    page_age: str | None = None

    def to_json(self) -> dict[str, str]:
        out = {"title": self.title, "url": self.url, "snippet": self.snippet}
        if self.page_age:
            out["page_age"] = self.page_age
        return out


@dataclass(frozen=True, slots=True)
class SearchOutput:
    """A tool result: content blocks and whether it is an error."""

    content: list[dict[str, Any]]
    is_error: bool = False


class SearchFailed(Exception):
    """A provider call failed; the message is written for the model (no secrets in it)."""


@dataclass(frozen=True, slots=True)
class DomainFilter:
    """`allowed_domains` / `blocked_domains` of the tool's config. An entry is a hostname
    (matching itself and its subdomains) with an optional path prefix: `example.com/docs`."""

    allowed: tuple[tuple[str, str], ...] = ()
    blocked: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> DomainFilter:
        """The filter of a resolved `web_search` config entry."""
        return cls(
            allowed=tuple(_entry(e) for e in config.get("allowed_domains") or ()),
            blocked=tuple(_entry(e) for e in config.get("blocked_domains") or ()),
        )

    def admits(self, url: str) -> bool:
        """Whether a result URL passes: on an allowed domain (if any are listed) and on no
        blocked one. URLs without an http(s) host never pass."""
        try:
            parts = urlsplit(url)
            host = (parts.hostname or "").rstrip(".").lower()
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not host:
            return False
        path = parts.path or "/"
        if self.allowed and not any(_matches(host, path, e) for e in self.allowed):
            return False
        return not any(_matches(host, path, e) for e in self.blocked)


def query_problem(tool_input: Mapping[str, Any]) -> str | None:
    """Why a call's input cannot be searched (for the model), or None."""
    query = tool_input.get("query")
    if not isinstance(query, str) or not query.strip():
        return "web_search needs a non-empty string `query`."
    if len(query) > MAX_QUERY_CHARS:
        return f"The query is longer than {MAX_QUERY_CHARS} characters; shorten it."
    return None


def _entry(value: str) -> tuple[str, str]:
    text = value.strip().lower()
    text = text.split("://", 1)[1] if "://" in text else text
    host, _, path = text.partition("/")
    return host.rstrip("."), ("/" + path.rstrip("/")) if path else ""


def _matches(host: str, path: str, entry: tuple[str, str]) -> bool:
    domain, prefix = entry
    if host != domain and not host.endswith("." + domain):
        return False
    return not prefix or path == prefix or path.startswith(prefix + "/")


def _clean(text: object, limit: int) -> str:
    """Plain text of a provider string: tags stripped (Brave marks hits with <strong>),
    entities decoded, whitespace collapsed, capped."""
    if not isinstance(text, str):
        return ""
    plain = _SPACE.sub(" ", html.unescape(_TAG.sub("", text))).strip()
    return plain if len(plain) <= limit else plain[: limit - 1].rstrip() + "…"


class WebSearch:
    """The server's search provider; one per process, shared by all sessions."""

    def __init__(self, config: WebSearchConfig, policy: AddressPolicy) -> None:
        self.config = config
        self._client = guarded_client(
            policy,
            timeout=httpx.Timeout(config.timeout_seconds),
            follow_redirects=False,
            headers={"accept": "application/json", "user-agent": "corral-web-search"},
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    def max_uses(self, config: Mapping[str, Any]) -> int | None:
        """Searches allowed per turn: the lower of the agent's `max_uses` and the operator's."""
        limits = [v for v in (config.get("max_uses"), self.config.max_uses) if isinstance(v, int)]
        return min(limits) if limits else None

    async def run(self, tool_input: Mapping[str, Any], config: Mapping[str, Any]) -> SearchOutput:
        """One `web_search` call: validate the query, search, filter, format."""
        problem = query_problem(tool_input)
        if problem is not None:
            return _error(problem)
        query = str(tool_input["query"])
        domains = DomainFilter.from_config(config)
        try:
            with anyio.fail_after(self.config.timeout_seconds):
                hits = await self._search(query.strip(), config, domains)
        except TimeoutError:
            return _error(
                f"Web search failed: the provider did not answer within "
                f"{self.config.timeout_seconds:g} seconds. Try again later."
            )
        except SearchFailed as exc:
            return _error(f"Web search failed: {exc}")
        return SearchOutput(content=[{"type": "text", "text": format_results(query, hits)}])

    async def _search(
        self, query: str, config: Mapping[str, Any], domains: DomainFilter
    ) -> list[SearchHit]:
        provider = self.config.provider
        try:
            if provider == "searxng":
                raw = await self._searxng(query)
            elif provider == "brave":
                raw = await self._brave(query, config)
            else:
                raw = await self._tavily(query, config)
        except OutboundRefused as exc:
            raise SearchFailed(f"the provider's address is not allowed ({exc})") from exc
        except httpx.TimeoutException as exc:
            raise SearchFailed("the provider timed out") from exc
        except httpx.HTTPError as exc:
            raise SearchFailed(f"cannot reach the provider ({type(exc).__name__})") from exc
        return [h for h in raw if domains.admits(h.url)][: self.config.max_results]

    async def _get_json(self, response: httpx.Response) -> Any:
        if response.status_code != 200:
            raise SearchFailed(f"the provider answered HTTP {response.status_code}")
        body = await _read_capped(response)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise SearchFailed("the provider's answer is not JSON") from exc

    async def _send(self, request: httpx.Request) -> Any:
        response = await self._client.send(request, stream=True)
        try:
            return await self._get_json(response)
        finally:
            await response.aclose()

    async def _searxng(self, query: str) -> list[SearchHit]:
        headers = {}
        if self.config.api_key:  # an instance behind an authenticating proxy
            headers["authorization"] = f"Bearer {self.config.api_key}"
        request = self._client.build_request(
            "GET",
            f"{self.config.url}/search",
            params={"q": query, "format": "json"},
            headers=headers,
        )
        doc = await self._send(request)
        items = _list_at(doc, "results")
        return [
            _hit(i.get("title"), i.get("url"), i.get("content"), i.get("publishedDate"))
            for i in items
        ]

    async def _brave(self, query: str, config: Mapping[str, Any]) -> list[SearchHit]:
        params: dict[str, str | int] = {"q": query, "count": min(self.config.max_results, 20)}
        country = _country(config)
        if country:
            params["country"] = country
        request = self._client.build_request(
            "GET",
            f"{self.config.url}/res/v1/web/search",
            params=params,
            headers={"x-subscription-token": self.config.api_key or ""},
        )
        doc = await self._send(request)
        web = doc.get("web") if isinstance(doc, dict) else None
        items = _list_at(web or {}, "results")
        return [
            _hit(i.get("title"), i.get("url"), i.get("description"), i.get("page_age"))
            for i in items
        ]

    async def _tavily(self, query: str, config: Mapping[str, Any]) -> list[SearchHit]:
        body: dict[str, Any] = {
            "query": query,
            "max_results": min(self.config.max_results, 20),
            "search_depth": "basic",
        }
        # Tavily can narrow the search itself; Corral still filters what comes back.
        if config.get("allowed_domains"):
            body["include_domains"] = list(config["allowed_domains"])
        if config.get("blocked_domains"):
            body["exclude_domains"] = list(config["blocked_domains"])
        request = self._client.build_request(
            "POST",
            f"{self.config.url}/search",
            json=body,
            headers={"authorization": f"Bearer {self.config.api_key or ''}"},
        )
        doc = await self._send(request)
        items = _list_at(doc, "results")
        return [
            _hit(i.get("title"), i.get("url"), i.get("content"), i.get("published_date"))
            for i in items
        ]


async def _read_capped(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > _MAX_RESPONSE_BYTES:
            raise SearchFailed("the provider's answer is larger than 4 MiB")
        chunks.append(chunk)
    return b"".join(chunks)


def _list_at(doc: object, key: str) -> list[dict[str, Any]]:
    items = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise SearchFailed(f"the provider's answer has no `{key}` list")
    return [i for i in items if isinstance(i, dict)]


def _hit(title: object, url: object, snippet: object, age: object) -> SearchHit:
    return SearchHit(
        title=_clean(title, _TITLE_CHARS),
        url=url if isinstance(url, str) else "",
        snippet=_clean(snippet, _SNIPPET_CHARS),
        page_age=_clean(age, 64) or None,
    )


def _country(config: Mapping[str, Any]) -> str | None:
    location = config.get("user_location")
    country = location.get("country") if isinstance(location, Mapping) else None
    return country.upper() if isinstance(country, str) and len(country) == 2 else None


def format_results(query: str, hits: Sequence[SearchHit]) -> str:
    """The text block the model gets: JSON with the query and the results in rank order."""
    doc: dict[str, Any] = {"query": query, "results": [h.to_json() for h in hits]}
    if not hits:
        doc["note"] = "No results (after this agent's domain filters). Try another query."
    return json.dumps(doc, ensure_ascii=False, indent=1)


def _error(message: str) -> SearchOutput:
    return SearchOutput(content=[{"type": "text", "text": message}], is_error=True)
