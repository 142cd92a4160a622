"""The console's files as `corral serve` ships them: no key needed for the pages (they hold no
data), security headers, every script module the pages import present, /v1 still guarded."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import PurePosixPath

import httpx
import pytest

from corral.console import STATIC_DIR
from tests.server import ServerProcess

IMPORT = re.compile(r"""^import\s+(?:[^"']*?\s+from\s+)?["'](\.[^"']+)["'];""", re.M)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("console-static")).start()
    yield proc
    proc.stop()


def test_console_redirects_and_serves_index_without_a_key(server: ServerProcess) -> None:
    moved = httpx.get(f"{server.url}/console", follow_redirects=False)
    assert moved.status_code == 308
    assert moved.headers["location"] == "/console/"
    page = httpx.get(f"{server.url}/console/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'src="js/app.js"' in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"


def test_every_imported_module_is_served(server: ServerProcess) -> None:
    """Walk the ES-module graph from app.js over HTTP: a missing file would break the page."""
    todo, seen = ["js/app.js"], set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        resp = httpx.get(f"{server.url}/console/{path}")
        assert resp.status_code == 200, path
        assert "javascript" in resp.headers["content-type"], path
        for spec in IMPORT.findall(resp.text):
            todo.append(str(PurePosixPath(path).parent / spec).replace("/./", "/"))
    on_disk = {str(p.relative_to(STATIC_DIR)) for p in STATIC_DIR.rglob("*.js")}
    assert seen == on_disk, f"modules never imported: {on_disk - seen}"
    assert httpx.get(f"{server.url}/console/console.css").status_code == 200


def test_unknown_files_and_traversal_are_404s_in_the_envelope(server: ServerProcess) -> None:
    for path in ("/console/nope.js", "/console/../pyproject.toml", "/console/%2e%2e/__init__.py"):
        resp = httpx.get(f"{server.url}{path}")
        assert resp.status_code == 404, path
        assert resp.json()["type"] == "error", path


def test_the_api_still_needs_the_key(server: ServerProcess) -> None:
    assert httpx.get(f"{server.url}/v1/agents").status_code == 401
    assert httpx.get(f"{server.url}/v1/agents", headers={"x-api-key": "test-key"}).is_success
