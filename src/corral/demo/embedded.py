"""`corral demo`: start an embedded server in this process, play the story through the SDK.

The server runs on a loopback port in a background thread with its own event loop, exactly as
`corral serve` would; the demo client knows only its URL and key.
"""

from __future__ import annotations

import secrets
import socket
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import httpx
from rich.console import Console

from corral.config import Settings


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
    with tempfile.TemporaryDirectory(prefix="corral-demo-") as scratch:
        data_dir = settings.data_dir if settings.data_dir != Path(".corral") else Path(scratch)
        demo_settings = replace(
            settings,
            host="127.0.0.1",
            port=_free_port(),
            api_keys=(key,),
            data_dir=data_dir / "server",
            database_url=None,
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
                outputs_dir=Path("corral-demo-outputs"),
            )
            team = run_team_act(client, model, console, first=result, data=data_dir / "demo-data")
        finally:
            server.stop()
    return 0 if result.solved and team.ok else 1
