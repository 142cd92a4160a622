"""Composition root: Settings -> backends -> services. The only module that picks adapters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from corral.brain.run import BrainDeps, BrainSettings
from corral.brain.sandboxes import SandboxPool
from corral.brain.scheduler import Scheduler
from corral.config import Settings
from corral.hands.base import Networking, SandboxRecipe
from corral.models.router import ModelRouter
from corral.service.agents import AgentService
from corral.service.environments import EnvironmentService
from corral.service.events import EventService
from corral.service.sessions import SessionService
from corral.store.base import Store


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """Services wired to one store, plus the brain scheduler of this process."""

    settings: Settings
    store: Store
    agents: AgentService
    environments: EnvironmentService
    sessions: SessionService
    events: EventService
    sandboxes: SandboxPool | None
    scheduler: Scheduler
    models: ModelRouter


def open_store(settings: Settings) -> Store:
    """SQLite by default; PostgreSQL when the database URL says so."""
    url = settings.database_url
    if url and url.startswith(("postgres://", "postgresql://")):
        from corral.store.postgres import PostgresStore

        return PostgresStore(url, fencing=not settings.test_disable_fencing)
    from corral.store.sqlite import SqliteStore

    path = Path(url.removeprefix("sqlite:///")) if url else settings.sqlite_path
    return SqliteStore(path, fencing=not settings.test_disable_fencing)


def _scripted_model():  # type: ignore[no-untyped-def]
    from corral.models.scripted import ScriptedModel

    return ScriptedModel()


@asynccontextmanager
async def open_runtime(settings: Settings) -> AsyncIterator[Runtime]:
    """Open the store and wire everything; closes it all on exit."""
    store = open_store(settings)
    await store.open()
    models = ModelRouter(
        list(settings.model_routes), settings.env, scripted_factory=_scripted_model
    )
    sandboxes: SandboxPool | None = None
    try:  # TEMPORARY until hands/local.py lands
        from corral.hands.local import LocalHands

        hands = LocalHands(settings.data_dir / "sandboxes", bwrap=settings.bwrap)
        sandboxes = SandboxPool(
            hands, _recipe_factory(settings, store), idle_seconds=settings.sandbox_idle_seconds
        )
    except ImportError:
        pass
    brain = BrainDeps(
        store=store,
        models=models,
        sandboxes=sandboxes,
        settings=BrainSettings(lease_seconds=settings.lease_seconds),
    )
    agents = AgentService(store, model_check=models.route_for)
    sessions = SessionService(store, agents)
    runtime = Runtime(
        settings=settings,
        store=store,
        agents=agents,
        environments=EnvironmentService(store),
        sessions=sessions,
        events=EventService(store, sessions),
        sandboxes=sandboxes,
        scheduler=Scheduler(brain, concurrency=settings.workers),
        models=models,
    )
    try:
        yield runtime
    finally:
        with anyio.CancelScope(shield=True):
            if sandboxes is not None:
                await sandboxes.aclose()
            await models.aclose()
            await store.aclose()


def _recipe_factory(settings: Settings, store: Store):  # type: ignore[no-untyped-def]
    async def recipe_for(session_id: str) -> SandboxRecipe:
        row = await store.get_session(session_id)
        networking = Networking()
        if row is not None:
            env = await store.get_resource("environment", row.environment_id)
            config = (env.body.get("config") if env else None) or {}
            net = config.get("networking") or {"type": "unrestricted"}
            networking = Networking(
                type=net["type"],
                allowed_hosts=tuple(net.get("allowed_hosts") or ()),
                allow_package_managers=bool(net.get("allow_package_managers")),
            )
        base = settings.data_dir / "sessions" / session_id
        for sub in ("workspace", "outputs"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        return SandboxRecipe(
            session_id=session_id,
            workspace=base / "workspace",
            outputs=base / "outputs",
            networking=networking,
        )

    return recipe_for
