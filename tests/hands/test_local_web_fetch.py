"""web_fetch inside bubblewrap sandboxes: through the egress proxy, obeying the networking."""

from __future__ import annotations

import gzip
import http.server
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.brain.actions import web_fetch_input
from corral.hands._agent import webfetch
from corral.hands._agent.filetools import ToolFailure
from corral.hands._agent.htmltext import html_to_text
from corral.hands.base import Networking
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import loopback_http, make_recipe, needs_bwrap

PAGE = b"""<!doctype html><html><head><title>Release notes</title>
<style>body { color: red }</style><script>var secret = "do not show";</script></head>
<body><h1>Welcome</h1><p>First   paragraph
with <a href="/next">a link</a>.</p><ul><li>one</li><li>two</li></ul>
<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table></body></html>"""
ROUTES: dict[str, tuple[int, dict[str, str], bytes]] = {
    "/page": (200, {"Content-Type": "text/html; charset=utf-8"}, PAGE),
    "/redirect": (302, {"Location": "/page"}, b""),
    "/away": (302, {"Location": "http://forbidden.invalid/secret"}, b""),
    "/loop": (302, {"Location": "/loop"}, b""),
    "/data.json": (200, {"Content-Type": "application/json"}, b'{"answer": 42}'),
    "/logo.png": (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + bytes(64)),
    "/missing": (404, {"Content-Type": "text/plain"}, b"no such page"),
    "/long.txt": (200, {"Content-Type": "text/plain"}, b"0123456789" * 1000),
    "/huge.txt": (200, {"Content-Type": "text/plain"}, b"x" * (3 * 1024 * 1024)),
    "/gz.txt": (
        200,
        {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        gzip.compress(b"zipped text"),
    ),
}


class _Site(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, headers, body = ROUTES.get(self.path, (404, {}, b"?"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def site() -> Iterator[str]:
    """An HTTP server on the host's loopback; yields its base URL."""
    with loopback_http(_Site) as port:
        yield f"http://127.0.0.1:{port}"


async def fetch(sandbox: LocalSandbox, url: str, **extra: object) -> tuple[str, bool]:
    out = await sandbox.execute("web_fetch", {"url": url, **extra})
    return out.content[0]["text"], out.is_error


async def sandbox_with(hands: LocalHands, tmp_path: Path, net: Networking) -> LocalSandbox:
    return await hands.provision(make_recipe(tmp_path, networking=net))


@needs_bwrap
@pytest.mark.bwrap
@pytest.mark.anyio
async def test_limited_fetches_allowed_hosts_as_text(
    local_hands: LocalHands, tmp_path: Path, site: str
) -> None:
    net = Networking(type="limited", allowed_hosts=("127.0.0.1",))
    sandbox = await sandbox_with(local_hands, tmp_path, net)
    text, err = await fetch(sandbox, f"{site}/page")
    assert not err, text
    assert text.startswith(f"URL: {site}/page\nTitle: Release notes\nContent-Type: text/html\n")
    assert "# Welcome" in text and "First paragraph with [a link](" in text
    assert f"[a link]({site}/next)" in text and "- one\n- two" in text and "k | v" in text
    assert "secret" not in text and "color" not in text
    text, err = await fetch(sandbox, f"{site}/redirect")
    assert not err and f"Redirected from: {site}/redirect" in text and "# Welcome" in text
    text, err = await fetch(sandbox, f"{site}/data.json")
    assert not err and text.endswith('\n\n{"answer": 42}')
    text, err = await fetch(sandbox, f"{site}/long.txt", max_content_tokens=10)
    assert not err and "\n\n0123456789012345678901234567890123456789\n" in text
    assert "[content truncated: showing 40 of 10000 characters]" in text
    text, err = await fetch(sandbox, f"{site}/gz.txt")
    assert not err and text.endswith("\n\nzipped text"), text
    text, err = await fetch(sandbox, f"{site}/huge.txt")
    assert not err and len(text) < 110 * 1024, "capped like other tools' output"
    assert "[the response was larger than 2 MiB; only the first part was read]" in text
    assert f"[content truncated: showing {100 * 1024} of {2 * 1024 * 1024} characters]" in text


@needs_bwrap
@pytest.mark.bwrap
@pytest.mark.anyio
async def test_errors_are_tool_errors_with_the_reason(
    local_hands: LocalHands, tmp_path: Path, site: str
) -> None:
    net = Networking(type="limited", allowed_hosts=("127.0.0.1", "no-such-host.invalid"))
    sandbox = await sandbox_with(local_hands, tmp_path, net)
    text, err = await fetch(sandbox, f"{site}/away")
    assert err and "forbidden.invalid" in text and "403" in text, text
    assert "not in allowed_hosts" in text
    text, err = await fetch(sandbox, f"{site}/logo.png")
    assert err and "content type 'image/png'" in text, text
    text, err = await fetch(sandbox, f"{site}/missing")
    assert err and "HTTP 404" in text and "no such page" in text, text
    text, err = await fetch(sandbox, f"{site}/loop")
    assert err and "more than 5 redirects" in text, text
    text, err = await fetch(sandbox, "https://no-such-host.invalid/")
    assert err and "502" in text and "no-such-host.invalid" in text, text
    for bad in ("ftp://127.0.0.1/", "file:///etc/passwd", "not a url"):
        text, err = await fetch(sandbox, bad)
        assert err and "only http and https" in text, text
    text, err = await fetch(sandbox, f"{site}/page", allowed_domains=["example.com"])
    assert err and "not in allowed_domains" in text, text
    text, err = await fetch(sandbox, f"{site}/redirect", blocked_domains=["127.0.0.1"])
    assert err and "in blocked_domains" in text, text


@needs_bwrap
@pytest.mark.bwrap
@pytest.mark.anyio
async def test_forbidden_hosts_get_the_proxy_refusal(
    local_hands: LocalHands, tmp_path: Path, site: str
) -> None:
    net = Networking(type="limited", allowed_hosts=("example.invalid",))
    sandbox = await sandbox_with(local_hands, tmp_path, net)
    text, err = await fetch(sandbox, f"{site}/page")
    assert err and "refused by the egress proxy (403 Forbidden)" in text, text
    assert "host '127.0.0.1' is not in allowed_hosts" in text
    text, err = await fetch(sandbox, site.replace("http:", "https:") + "/page")
    assert err and "403" in text and "not in allowed_hosts" in text, text


@needs_bwrap
@pytest.mark.bwrap
@pytest.mark.anyio
async def test_unrestricted_cannot_reach_the_hosts_loopback(
    local_hands: LocalHands, tmp_path: Path, site: str
) -> None:
    sandbox = await sandbox_with(local_hands, tmp_path, Networking(type="unrestricted"))
    text, err = await fetch(sandbox, f"{site}/page")
    assert err and "sandboxes may only reach public addresses" in text, text
    assert "Welcome" not in text


@needs_bwrap
@pytest.mark.bwrap
@pytest.mark.anyio
async def test_no_networking_means_no_fetch(
    local_hands: LocalHands, tmp_path: Path, site: str
) -> None:
    sandbox = await sandbox_with(local_hands, tmp_path, Networking(type="none"))
    text, err = await fetch(sandbox, f"{site}/page")
    assert err and "no network access" in text, text


def test_a_stalled_server_times_out() -> None:
    """The whole fetch has one deadline, however slowly the other side answers."""
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(1)
        port = stalled.getsockname()[1]
        domains = webfetch.Domains(None, None)
        with pytest.raises(ToolFailure, match="timed out after 0.5s"):
            webfetch.fetch("http://example.com/", port, domains, time_limit=0.5)


def test_html_to_text_keeps_structure() -> None:
    html = (
        "<title> A  title </title><base href='https://docs.example/v2/'>"
        "<h2>Intro</h2><p>Read <a href='guide'>the guide</a> or <a href='#top'>top</a>.</p>"
        "<pre>  indented\n    code</pre><ul><li>a<ul><li>b</li></ul></li></ul>"
        "<noscript>enable js</noscript><p>x&amp;y</p>"
    )
    title, text = html_to_text(html, "https://ignored.example/")
    assert title == "A title"
    assert text == (
        "## Intro\n\nRead [the guide](https://docs.example/v2/guide) or top.\n\n"
        "  indented\n    code\n\n- a\n  - b\n\nx&y"
    )


def test_the_brain_bounds_web_fetch_input_by_the_tool_config() -> None:
    config = {
        "name": "web_fetch",
        "enabled": True,
        "allowed_domains": ["docs.example"],
        "max_content_tokens": 100,
    }
    agent = {"tools": [{"type": "agent_toolset_20260401", "configs": [config]}]}
    sent = {"url": "https://x", "max_content_tokens": 500, "blocked_domains": [], "extra": 1}
    assert web_fetch_input(agent, sent) == {
        "url": "https://x",
        "max_content_tokens": 100,
        "allowed_domains": ["docs.example"],
    }
    assert web_fetch_input({"tools": []}, {"url": "u", "max_content_tokens": 7}) == {
        "url": "u",
        "max_content_tokens": 7,
    }
