"""`corral demo`: start an embedded server in this process, play the story through the SDK.

The server runs on a loopback port in a background thread with its own event loop, exactly as
`corral serve` would; the demo client knows only its URL and key.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
from rich.console import Console

from corral.config import Settings
from corral.observability.logs import JsonFormatter

OUTPUTS_DIR = Path("corral-demo-outputs")
SERVER_LOG = OUTPUTS_DIR / "server.log"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedServer:
    """`corral serve` in a daemon thread, for the demo and local experiments."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._server: Any = None
        self._thread = threading.Thread(target=self._run, name="corral-embedded", daemon=True)
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        return f"http://{self.settings.host}:{self.settings.port}"

    def _run(self) -> None:
        from corral.serving import serve_async

        def ready(server: Any) -> None:
            self._server = server

        try:
            anyio.run(lambda: serve_async(self.settings, ready=ready))
        except BaseException as exc:  # reported by start()
            self._error = exc

    def start(self) -> EmbeddedServer:
        """Start and wait for /health."""
        self._thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._error is not None:
                raise RuntimeError(f"embedded server failed: {self._error!r}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError("embedded server did not start")

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for the thread."""
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(timeout=15)


def run_embedded_demo(settings: Settings, *, model: str) -> int:
    """Play both acts; 0 when the triage found both causing deploys and the follow-up's
    lessons were saved to memory by its session and read back by a later one."""
    import anthropic

    from corral.demo.runner import run_demo
    from corral.demo.team_runner import run_team_act

    console = Console(highlight=False)
    key = "crl_demo_" + secrets.token_urlsafe(16)
    with (
        tempfile.TemporaryDirectory(prefix="corral-demo-") as scratch,
        _server_log_in(SERVER_LOG),
    ):
        given = settings.source("data_dir") != "default"
        data_dir = settings.data_dir if given else Path(scratch)
        demo_settings = settings.model_copy(
            update={
                "host": "127.0.0.1",
                "port": _free_port(),
                "api_keys": (key,),
                "data_dir": data_dir / "server",
                "database_url": None,
            }
        )
        server = EmbeddedServer(demo_settings).start()
        try:
            client = anthropic.Anthropic(base_url=server.url, api_key=key)
            result = run_demo(
                server.url,
                key,
                model,
                console,
                data_dir=data_dir / "demo-data",
                attach_files=True,
                client=client,
                outputs_dir=OUTPUTS_DIR,
            )
            team = run_team_act(client, model, console, first=result, data=data_dir / "demo-data")
        finally:
            server.stop()
    console.print(f"[dim]The embedded server's log: {SERVER_LOG}[/dim]")
    return 0 if result.solved and team.ok else 1


@contextlib.contextmanager
def _server_log_in(path: Path) -> Iterator[None]:
    """The story is the demo's output: the embedded server's records go to `path` (JSON
    lines), and only its warnings and errors to the terminal as well."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setFormatter(JsonFormatter())
    levels = [(handler, handler.level) for handler in root.handlers]
    for handler, _ in levels:
        handler.setLevel(max(handler.level, logging.WARNING))
    root.addHandler(to_file)
    try:
        yield
    finally:
        root.removeHandler(to_file)
        to_file.close()
        for handler, level in levels:
            handler.setLevel(level)
