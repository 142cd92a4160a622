"""`corral hands`: run Corral's own worker for a `self_hosted` environment (docs/self_hosted.md)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console
from rich.markup import escape

from corral.cli_config import load_or_exit
from corral.cli_options import DataDir
from corral.config import Settings
from corral.hands.base import Limits, Networking
from corral.preflight import check_sandbox_uids, reported
from corral.settings.checks import absolute_path

console = Console(stderr=True)
KEY_VARIABLE = "CORRAL_ENVIRONMENT_KEY"


def hands(
    url: Annotated[str, typer.Option("--url", help="The Corral server, e.g. https://corral:8080")],
    environment: Annotated[
        str, typer.Option("--environment", help="The self_hosted environment's id (env_…).")
    ],
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir", help=escape("Workspaces, skills, memory. [default: DATA_DIR/hands]")
        ),
    ] = None,
    network: Annotated[
        str,
        typer.Option(help="Sandbox egress: unrestricted, limited (with --allow-host) or none."),
    ] = "unrestricted",
    allow_host: Annotated[
        list[str] | None,
        typer.Option("--allow-host", help="A host sandboxes may reach (network=limited)."),
    ] = None,
    max_idle: Annotated[
        float, typer.Option(help="Seconds a finished session is kept before leaving it.")
    ] = 60.0,
    capacity: Annotated[int, typer.Option(help="Sessions served at once.")] = 4,
    data_dir: DataDir = None,
) -> None:
    """Serve a self_hosted environment's sessions here, in bubblewrap sandboxes. The key is
    read from CORRAL_ENVIRONMENT_KEY; the sandboxes' settings (bwrap, sandbox_uid_range,
    sandbox_disk_bytes, egress_*) from the environment and config file, as for serve."""
    settings = load_or_exit({"data_dir": data_dir}).settings
    key = settings.environment_key or ""
    problems = []
    if not key:
        problems.append(f"{KEY_VARIABLE} is not set (create one with `corral env-key create`)")
    if network not in ("unrestricted", "limited", "none"):
        problems.append("--network must be unrestricted, limited or none")
    if network != "limited" and allow_host:
        problems.append("--allow-host needs --network limited")
    if not url.startswith(("http://", "https://")):
        problems.append("--url must be an http(s) URL")
    if max_idle <= 0 or capacity < 1:
        problems.append("--max-idle must be positive and --capacity at least 1")
    if problems:
        for problem in problems:
            console.print(f"[red]corral hands:[/] {problem}")
        raise typer.Exit(2)
    with reported():
        check_sandbox_uids(settings)
    networking = Networking(
        type=network,  # type: ignore[arg-type]  # checked above
        allowed_hosts=tuple(allow_host or ()),
    )
    # absolute: sandboxes start from `/`, where a relative workdir names nothing
    root = absolute_path(workdir, Path.cwd()) if workdir else settings.data_dir / "hands"
    for noisy in ("httpx", "httpx2"):  # one line per poll otherwise
        logging.getLogger(noisy).setLevel(logging.WARNING)
    console.print(f"corral hands: serving {environment} from {url} (files in {root})")
    try:
        anyio.run(_run, settings, url, environment, key, root, networking, max_idle, capacity)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


async def _run(
    settings: Settings,
    url: str,
    environment: str,
    key: str,
    root: Path,
    networking: Networking,
    max_idle: float,
    capacity: int,
) -> None:
    import anthropic

    from corral.hands._uids import UidRange
    from corral.hands.local import LocalHands
    from corral.selfhosted.worker import HandsWorker, WorkerConfig

    await anyio.Path(root).mkdir(mode=0o700, parents=True, exist_ok=True)
    local = LocalHands(
        root / "sandboxes",
        settings.bwrap,
        egress=settings.egress,
        uid_range=UidRange(*settings.sandbox_uid_range),
    )
    config = WorkerConfig(
        url=url.rstrip("/"),
        environment_id=environment,
        environment_key=key,
        workdir=root,
        networking=networking,
        limits=Limits(disk_bytes=settings.sandbox_disk_bytes),
        max_idle=max_idle,
        capacity=capacity,
    )
    worker = HandsWorker(config, local)
    try:
        await worker.run()
    except anthropic.APIStatusError as exc:
        console.print(f"[red]corral hands:[/] the server refused to poll: {exc.message}")
        raise typer.Exit(1) from exc
    finally:
        with anyio.CancelScope(shield=True):
            await worker.aclose()
