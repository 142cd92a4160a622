"""`WebSearch` against a loopback stand-in of each provider: the requests they get, the
results the model gets, Corral's domain filter, and every failure as an error result."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from corral.outbound import server_policy
from corral.tools.web_search import DomainFilter, SearchOutput, WebSearch
from corral.web_search_config import WebSearchConfig, parse_web_search
from tests.fakes.search_server import FakeSearchServer, Hit

HITS = [
    Hit("Corral <strong>docs</strong>", "https://docs.example.com/guide", "How &amp; why", "2d"),
    Hit("Blog", "https://example.org/blog/post", "A post"),
    Hit("Ads", "https://ads.tracker.example.net/x", "Buy now"),
]


@pytest.fixture
def stand_in() -> Iterator[FakeSearchServer]:
    with FakeSearchServer(results=list(HITS)) as server:
        yield server


def searcher(stand_in: FakeSearchServer, **table: Any) -> WebSearch:
    env = {"SEARCH_KEY": "key-123"}
    config = parse_web_search({"url": stand_in.url, **table}, env)
    assert isinstance(config, WebSearchConfig)
    return WebSearch(config, server_policy([f"127.0.0.1:{stand_in.port}"]))


async def search(ws: WebSearch, query: str, config: dict[str, Any] | None = None) -> SearchOutput:
    try:
        return await ws.run({"query": query}, config or {})
    finally:
        await ws.aclose()


def results(output: SearchOutput) -> list[dict[str, Any]]:
    assert not output.is_error, output.content
    doc = json.loads(output.content[0]["text"])
    return list(doc["results"])


@pytest.mark.anyio
async def test_searxng_request_and_result_shape(stand_in: FakeSearchServer) -> None:
    output = await search(searcher(stand_in, provider="searxng"), "corral agents")
    [seen] = stand_in.seen
    assert (seen.method, seen.path) == ("GET", "/search")
    assert seen.query == {"q": ["corral agents"], "format": ["json"]}
    assert "authorization" not in seen.headers
    first = results(output)[0]
    assert first == {
        "title": "Corral docs",
        "url": "https://docs.example.com/guide",
        "snippet": "How & why",
        "page_age": "2d",
    }
    assert json.loads(output.content[0]["text"])["query"] == "corral agents"


@pytest.mark.anyio
async def test_brave_request_shape(stand_in: FakeSearchServer) -> None:
    ws = searcher(stand_in, provider="brave", api_key_env="SEARCH_KEY", max_results=3)
    location = {"type": "approximate", "country": "de"}
    output = await search(ws, "q1", {"user_location": location})
    [seen] = stand_in.seen
    assert (seen.method, seen.path) == ("GET", "/res/v1/web/search")
    assert seen.query == {"q": ["q1"], "count": ["3"], "country": ["DE"]}
    assert seen.headers["x-subscription-token"] == "key-123"
    assert [r["url"] for r in results(output)] == [h.url for h in HITS]


@pytest.mark.anyio
async def test_tavily_request_shape(stand_in: FakeSearchServer) -> None:
    ws = searcher(stand_in, provider="tavily", api_key_env="SEARCH_KEY")
    output = await search(ws, "q2", {"allowed_domains": ["example.com"]})
    [seen] = stand_in.seen
    assert (seen.method, seen.path) == ("POST", "/search")
    assert seen.headers["authorization"] == "Bearer key-123"
    assert seen.body == {
        "query": "q2",
        "max_results": 10,
        "search_depth": "basic",
        "include_domains": ["example.com"],
    }
    assert [r["url"] for r in results(output)] == ["https://docs.example.com/guide"]


@pytest.mark.anyio
async def test_results_are_capped_at_max_results(stand_in: FakeSearchServer) -> None:
    output = await search(searcher(stand_in, provider="searxng", max_results=2), "q")
    assert len(results(output)) == 2


@pytest.mark.anyio
async def test_everything_filtered_out_says_so(stand_in: FakeSearchServer) -> None:
    ws = searcher(stand_in, provider="searxng")
    output = await search(ws, "q", {"allowed_domains": ["nowhere.example"]})
    assert results(output) == []
    assert "No results" in json.loads(output.content[0]["text"])["note"]


def test_domain_filter_matches_subdomains_and_paths() -> None:
    allowed = DomainFilter.from_config({"allowed_domains": ["example.com", "example.org/blog"]})
    assert allowed.admits("https://example.com/x")
    assert allowed.admits("https://docs.EXAMPLE.com./x")
    assert allowed.admits("https://example.org/blog/post")
    assert allowed.admits("https://example.org/blog")
    assert not allowed.admits("https://example.org/blogger")
    assert not allowed.admits("https://notexample.com/")
    assert not allowed.admits("https://example.com.evil.net/")
    assert not allowed.admits("ftp://example.com/file")
    assert not allowed.admits("javascript:alert(1)")
    blocked = DomainFilter.from_config({"blocked_domains": ["tracker.example.net"]})
    assert blocked.admits("https://example.net/")
    assert not blocked.admits("https://ads.tracker.example.net/")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "raw", "message"),
    [
        (503, None, "HTTP 503"),
        (200, b"<html>not json</html>", "not JSON"),
        (200, b'{"answer": 42}', "no `results` list"),
    ],
)
async def test_provider_failures_are_error_results(
    stand_in: FakeSearchServer, status: int, raw: bytes | None, message: str
) -> None:
    stand_in.status, stand_in.raw_body = status, raw
    output = await search(searcher(stand_in, provider="searxng"), "q")
    assert output.is_error
    assert message in output.content[0]["text"]


@pytest.mark.anyio
async def test_a_slow_provider_times_out(stand_in: FakeSearchServer) -> None:
    stand_in.delay = 3.0
    output = await search(searcher(stand_in, provider="searxng", timeout_seconds=0.3), "q")
    assert output.is_error and "did not answer within 0.3 seconds" in output.content[0]["text"]


@pytest.mark.anyio
async def test_loopback_provider_is_refused_without_an_allow_rule(
    stand_in: FakeSearchServer,
) -> None:
    config = parse_web_search({"provider": "searxng", "url": stand_in.url}, {})
    assert config is not None
    output = await search(WebSearch(config, server_policy([])), "q")
    assert output.is_error and "address is not allowed" in output.content[0]["text"]
    assert stand_in.seen == []


@pytest.mark.anyio
@pytest.mark.parametrize("query", ["", "   ", None, "x" * 1001])
async def test_bad_queries_never_reach_the_provider(
    stand_in: FakeSearchServer, query: str | None
) -> None:
    ws = searcher(stand_in, provider="searxng")
    try:
        output = await ws.run({"query": query}, {})
    finally:
        await ws.aclose()
    assert output.is_error and stand_in.seen == []
