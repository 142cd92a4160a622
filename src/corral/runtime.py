"""Composition root: Settings -> backends -> services. The only module that picks adapters."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from corral.brain.mcp import McpToolsets
from corral.brain.memo import Memo
from corral.brain.run import BrainDeps, BrainSettings
from corral.brain.scheduler import Scheduler
from corral.config import Settings
from corral.errors import HandsError
from corral.files.blobs import LocalBlobStore
from corral.files.outputs import OutputCollector, OutputLimits
from corral.files.service import FileService
from corral.hands.base import SKILLS_DIR, Limits, Mount, Networking, Repository, SandboxRecipe
from corral.hands.layers import LayerBuilder, PackageSpec, layer_env, layer_mount
from corral.hands.pool import SandboxPool, Standings
from corral.hands.repositories import RepositoryCheckouts, RepositoryFailure
from corral.hands.workspaces import SessionDirs
from corral.mcp.client import McpClient
from corral.models.base import ModelClient
from corral.models.router import ModelRouter
from corral.netpolicy import AddressPolicy
from corral.outbound import server_policy
from corral.preflight import check_vault_key, key_source, sqlite_file
from corral.service.agents import AgentService
from corral.service.egress_credentials import EgressCredentials
from corral.service.environments import EnvironmentService
from corral.service.events import EventService
from corral.service.memory_mounts import MemoryMounts
from corral.service.memory_resources import MemoryResources
from corral.service.memory_stores import MemoryStoreService
from corral.service.repositories import RepositoryResources, RepositoryTokens
from corral.service.resources import SessionResources
from corral.service.sessions import SessionService
from corral.service.skills import SkillService
from corral.service.threads import ThreadService
from corral.service.vaults import VaultService
from corral.service.work import WorkService
from corral.stopping import Stopping
from corral.store.base import Resource, SessionRow, Store
from corral.store.work import work_items_for
from corral.tools.web_search import WebSearch
from corral.vault.keys import LoadedKeys, load_keys
from corral.vault.secrets import VaultSecrets

log = logging.getLogger("corral.runtime")


@dataclass(frozen=True, slots=True, kw_only=True)
class Runtime:
    """Services wired to one store, plus the brain scheduler of this process."""

    settings: Settings
    store: Store
    agents: AgentService
    environments: EnvironmentService
    sessions: SessionService
    events: EventService
    files: FileService
    skills: SkillService
    vaults: VaultService
    memory_stores: MemoryStoreService
    vault_secrets: VaultSecrets
    """The seam MCP clients and egress resolve credentials through (`SecretResolver`)."""
    sandboxes: SandboxPool
    scheduler: Scheduler
    models: ModelRouter
    work: WorkService | None = None
    """The self-hosted work queue and its workers' credentials (docs/self_hosted.md)."""
    threads: ThreadService | None = None
    """`sessions.threads` and the routing of client events to child threads."""
    stopping: Stopping = field(default_factory=Stopping)
    """This process's graceful stop: brains hand over, SSE streams end (`corral.stopping`)."""


def open_store(settings: Settings) -> Store:
    """SQLite by default; PostgreSQL when the database URL says so."""
    url = settings.database_url
    if url and url.startswith(("postgres://", "postgresql://")):
        from corral.store.postgres import PostgresStore

        store: Store = PostgresStore(url, store_timeout=settings.store_timeout_seconds)
        return store
    from corral.store.sqlite import SqliteStore

    return SqliteStore(sqlite_file(settings), store_timeout=settings.store_timeout_seconds)


def _scripted_model() -> ModelClient:
    from corral.demo.story import demo_story
    from corral.models.scripted import ScriptedModel

    return ScriptedModel(story=demo_story)


@asynccontextmanager
async def open_runtime(settings: Settings, *, vault_check: bool = True) -> AsyncIterator[Runtime]:
    """Open the store and wire everything; closes it all on exit.

    Everything opened is closed, in reverse order, even when wiring fails half-way or one
    close raises (the others still run). With `vault_check`, refuses to start
    (`StartupError`) when the configured vault keys do not open the stored credentials (see
    `preflight.check_vault_key`).
    """
    closing = AsyncExitStack()
    try:
        yield await _wire(settings, closing, vault_check=vault_check)
    finally:
        with anyio.CancelScope(shield=True):
            await closing.aclose()


async def _wire(settings: Settings, closing: AsyncExitStack, *, vault_check: bool) -> Runtime:
    """Open and connect every part, registering each one's close on `closing` as it opens."""
    from corral.hands._uids import UidRange
    from corral.hands.local import LocalHands

    await anyio.to_thread.run_sync(secure_data_dir, settings.data_dir)
    loaded = _vault_keys(settings)  # before the store opens: a bad key fails fast
    keyring = loaded.keyring
    store = open_store(settings)
    await store.open()
    closing.push_async_callback(store.aclose)
    if vault_check:
        await check_vault_key(store, keyring, key_source(settings, loaded))
    work_items = work_items_for(store)
    vault_secrets = VaultSecrets(store, keyring)
    egress_credentials = EgressCredentials(vault_secrets, settings.data_dir)
    models = ModelRouter(
        list(settings.model_routes),
        settings.env,
        scripted_factory=_scripted_model,
        stall_timeout=settings.model_stall_timeout_seconds,
    )
    closing.push_async_callback(models.aclose)
    blobs = LocalBlobStore(settings.data_dir / "blobs")
    files = FileService(store, blobs, max_bytes=settings.max_file_bytes)
    skills = SkillService(
        store, blobs, settings.data_dir / "skills", anthropic=settings.anthropic_skills
    )
    web_search = _web_search(settings)
    if web_search is not None:
        closing.push_async_callback(web_search.aclose)
    agents = AgentService(
        store,
        model_check=models.route_for,
        skill_resolver=skills.resolve,
        tool_providers=frozenset({"web_search"} if web_search else ()),
    )
    dirs = SessionDirs(settings.data_dir / "sessions")
    repo_tokens = RepositoryTokens(store, keyring)
    hands = LocalHands(
        settings.data_dir / "sandboxes",
        settings.bwrap,
        egress=settings.egress,
        uid_range=UidRange(*settings.sandbox_uid_range),
        git_tokens=repo_tokens.current,
    )
    purge = storage_purger(dirs, files, hands.free_uid)
    repositories = RepositoryResources(
        repo_tokens, AddressPolicy.from_entries(settings.egress_allow_private)
    )
    sessions = SessionService(
        store,
        agents,
        SessionResources(files, repositories),
        purge=purge,
        work=work_items,
        work_ttl_seconds=settings.work_ttl_seconds,
        prices=models.price_for,
    )
    checkouts = RepositoryCheckouts(
        repo_tokens.current, AddressPolicy.from_entries(settings.egress_allow_private)
    )

    async def clone_repositories(recipe: SandboxRecipe) -> list[RepositoryFailure]:
        """Before a sandbox is made: clone its repositories as its uid's files."""
        return await checkouts.prepare(recipe, await hands.owner(recipe.session_id))

    outputs = OutputCollector(
        files,
        OutputLimits(
            max_files=settings.outputs_max_files,
            max_bytes_per_call=settings.outputs_max_bytes_per_call,
            max_bytes_per_session=settings.outputs_max_bytes_per_session,
        ),
    )

    memory_stores = MemoryStoreService(store)
    memory_mounts = MemoryMounts(memory_stores, settings.data_dir / "sessions")

    async def collect_outputs(recipe: SandboxRecipe) -> list[str]:
        """After each call; returns notes on refused outputs and on memory the agent wrote
        that was not saved (see `service.memory_mounts`), for the tool result."""
        notes = await outputs.collect(recipe.session_id, recipe.outputs)
        return notes + await memory_mounts.sync(recipe.session_id)

    layers = LayerBuilder(hands, settings.data_dir / "layers")
    sandboxes = SandboxPool(
        hands,
        recipe_factory(
            settings,
            store,
            files,
            skills,
            layers=layers,
            credentials=egress_credentials,
            memory=memory_mounts,
        ),
        standings=session_standings(store, credentials=egress_credentials),
        hold=dirs.hold,
        purge=purge,
        idle_seconds=settings.sandbox_idle_seconds,
        after_execute=collect_outputs,
        prepare=clone_repositories,
    )
    closing.push_async_callback(sandboxes.aclose)
    # MCP servers and their token endpoints are fetched under the operator's address rules.
    mcp_client = McpClient(vault_secrets, server_policy(settings.egress_allow_private))
    stopping = Stopping(settings.shutdown_grace_seconds)
    brain = BrainDeps(
        stopping=stopping,
        credential_check=egress_credentials.check,
        store=store,
        models=models,
        sandboxes=sandboxes,
        skills=skills,
        web_search=web_search,
        mcp=McpToolsets(mcp_client),
        work=work_items,
        prices=models,
        contexts=models,
        memo=Memo(max_bytes=settings.brain_memo_mib * 1024 * 1024),
        settings=BrainSettings(
            lease_seconds=settings.lease_seconds,
            model_retry_max_seconds=settings.model_retry_max_seconds,
            eager_sandboxes=settings.eager_sandboxes,
            work_ttl_seconds=settings.work_ttl_seconds,
        ),
    )
    sessions.resources.memory = MemoryResources(memory_stores)
    events = EventService(store, sessions)
    threads = ThreadService(store, sessions, events)
    events.router = threads.send
    runtime = Runtime(
        settings=settings,
        store=store,
        agents=agents,
        environments=EnvironmentService(store),
        sessions=sessions,
        events=events,
        threads=threads,
        files=files,
        skills=skills,
        vaults=VaultService(vault_secrets, mcp=mcp_client),
        memory_stores=memory_stores,
        vault_secrets=vault_secrets,
        sandboxes=sandboxes,
        scheduler=Scheduler(brain, concurrency=settings.workers),
        models=models,
        work=WorkService(store, work_items, ttl_seconds=settings.work_ttl_seconds),
        stopping=stopping,
    )
    return runtime


DATA_SUBDIRS = ("sessions", "sandboxes", "blobs", "skills", "layers")


def secure_data_dir(data_dir: Path) -> None:
    """Create the data dir and its top-level directories, and make them all 0700 (older data
    dirs included): they hold the database, every session's files and the sandboxes' state,
    and neither a sandbox's uid nor any other user may walk into them."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (data_dir, *(data_dir / sub for sub in DATA_SUBDIRS)):
        path.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)


def _web_search(settings: Settings) -> WebSearch | None:
    """The `web_search` provider, if the operator configured one (its URL obeys the same
    address rules as sandbox egress: a private host must be in `[egress] allow_private`)."""
    if settings.web_search is None:
        return None
    log.info("web_search served by %s at %s", settings.web_search.provider, settings.web_search.url)
    return WebSearch(settings.web_search, server_policy(settings.egress_allow_private))


def _vault_keys(settings: Settings) -> LoadedKeys:
    """The vault keys; says where a generated key file is (never the key) so it gets backed up."""
    loaded = load_keys(settings.vault_key, settings.data_dir)
    if loaded.generated:
        log.warning(
            "generated a vault key at %s (mode 0600): back it up, or set CORRAL_VAULT_KEY; "
            "without it stored credentials cannot be used (see docs/vaults.md)",
            loaded.key_file,
        )
    log.info(
        "vault key id %s (%d key(s) configured)",
        loaded.keyring.primary_id,
        len(loaded.keyring.key_ids),
    )
    return loaded


def recipe_factory(
    settings: Settings,
    store: Store,
    files: FileService,
    skills: SkillService,
    *,
    layers: LayerBuilder | None = None,
    memory: MemoryMounts | None = None,
    credentials: EgressCredentials | None = None,
) -> Callable[[str], Awaitable[SandboxRecipe]]:
    """How a session's sandbox is (re)made: environment networking and packages, file mounts,
    skills. The environment's package layer is built on first use (see `hands.layers`)."""

    async def recipe_for(session_id: str) -> SandboxRecipe:
        row = await store.get_session(session_id)
        if row is None:
            raise LookupError(f"session {session_id} is gone")
        env = await store.get_resource("environment", row.environment_id)
        # Fail closed: a deleted environment's networking is unknown, so grant none.
        config = (env.body.get("config") or {}) if env else {"networking": {"type": "none"}}
        mounts = await _resource_mounts(row.body, files, skills)
        if memory is not None:  # attached memory stores, filled from the store afresh
            mounts.extend(await memory.mounts(session_id, row.body))
        extra_env: dict[str, str] = {}
        spec = PackageSpec.from_config(config.get("packages"))
        if not spec.empty:
            if layers is None:
                msg = "this server cannot install environment packages"
                raise HandsError("packages_unsupported", msg, retryable=False)
            mounts.append(layer_mount(await layers.ensure(spec)))
            extra_env.update(layer_env())
        # `environment_variable` credentials: the sandbox gets placeholders, the proxy secrets
        placeholders, interception = (
            await credentials.for_sandbox(
                session_id, row.body.get("vault_ids") or [], row.environment_id,
                config.get("networking") or {"type": "unrestricted"},
            )
            if credentials is not None
            else ({}, None)
        )  # fmt: skip
        base = settings.data_dir / "sessions" / session_id
        for sub in ("workspace", "outputs"):  # the sandbox's uid is made their owner later
            (base / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        return SandboxRecipe(
            session_id=session_id,
            workspace=base / "workspace",
            outputs=base / "outputs",
            networking=_networking(config),
            mounts=tuple(mounts),
            env={**placeholders, **extra_env},
            interception=interception,
            repositories=_repositories(row.body),
            limits=Limits(disk_bytes=settings.sandbox_disk_bytes),
        )

    return recipe_for


def recipe_generation(row: SessionRow, env: Resource | None) -> str | None:
    """A digest of every input of `recipe_factory`'s recipe (keep the two in step), or None
    when the session may hold no sandbox. File and skill contents are immutable per id and
    version, so ids suffice."""
    if row.archived_at is not None or row.summary.status == "terminated":
        return None
    inputs = {
        "environment": [row.environment_id, env.body.get("config") if env else None],
        "resources": row.body.get("resources") or [],
        "skills": row.body["agent"].get("skills") or [],
    }
    encoded = json.dumps(inputs, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(encoded.encode()).hexdigest()


def session_standings(
    store: Store, *, concurrency: int = 8, credentials: EgressCredentials | None = None
) -> Standings:
    """`SandboxPool`'s view of sessions: generation per existing session, in one batch
    (concurrent reads; each environment read once). With `credentials`, the state of a
    session's `environment_variable` credentials is part of it (an archived or updated
    credential re-makes the sandbox that substitutes it)."""

    async def standings(session_ids: Sequence[str]) -> dict[str, str | None]:
        rows: list[SessionRow] = []
        limiter = anyio.CapacityLimiter(concurrency)

        async def read(session_id: str) -> None:
            async with limiter:
                row = await store.get_session(session_id)
            if row is not None:
                rows.append(row)

        async with anyio.create_task_group() as tg:
            for session_id in dict.fromkeys(session_ids):
                tg.start_soon(read, session_id)
        envs = {
            env_id: await store.get_resource("environment", env_id)
            for env_id in {row.environment_id for row in rows}
        }
        generations = {row.id: recipe_generation(row, envs[row.environment_id]) for row in rows}
        for row in rows:
            generation, vault_ids = generations[row.id], row.body.get("vault_ids")
            if credentials is not None and generation is not None and vault_ids:
                generations[row.id] = f"{generation}:{await credentials.fingerprint(vault_ids)}"
        return generations

    return standings


def storage_purger(
    dirs: SessionDirs, files: FileService, free_uid: Callable[[str], Awaitable[None]]
) -> Callable[[str], Awaitable[bool]]:
    """`purge_session_storage`, bound to this process's data dir."""

    async def purge_session_storage(session_id: str) -> bool:
        """THE one place that removes what a deleted session left on the host.

        Runs under the directory's exclusive lock, i.e. only when no sandbox of the session
        is alive in any process sharing the data dir; otherwise it returns False and the
        pool holding the sandbox calls it again after destroying it. Called by the API right
        after the delete and by pools, so it must be idempotent; it never raises.
        Per-session host state is released here, under the lock:
        - the session's output file objects (files): also deleted by the API at once, and
          again here, since a sandbox alive elsewhere may have collected more meanwhile;
        - the directory (workspace and outputs);
        - last, the session's sandbox uid: a later session given it must find nothing owned.
        """
        try:
            async with dirs.exclusive(session_id) as free:
                if not free:
                    return False
                await files.delete_session_files(session_id)
                removed = await dirs.remove(session_id)
                if removed:
                    await free_uid(session_id)
                return removed
        except Exception:
            log.exception("purging the files of deleted session %s", session_id)
            return False

    return purge_session_storage


_NETWORK_TYPES: dict[str, Literal["unrestricted", "limited", "none"]] = {
    "limited": "limited",
    "none": "none",
}


def _networking(config: dict[str, Any]) -> Networking:
    net = config.get("networking") or {"type": "unrestricted"}
    return Networking(
        type=_NETWORK_TYPES.get(net["type"], "unrestricted"),
        allowed_hosts=tuple(net.get("allowed_hosts") or ()),
        allow_package_managers=bool(net.get("allow_package_managers")),
    )


def _repositories(session: dict[str, Any]) -> tuple[Repository, ...]:
    """The session's `github_repository` resources, as the hands clone and forward them."""
    out = []
    for resource in session.get("resources") or []:
        if resource.get("type") == "github_repository":
            checkout = resource.get("checkout") or None
            out.append(
                Repository(
                    resource_id=resource["id"],
                    url=resource["url"],
                    mount_path=resource["mount_path"],
                    checkout=(
                        (checkout["type"], checkout.get("name") or checkout["sha"])
                        if checkout
                        else None
                    ),
                )
            )
    return tuple(out)


async def _resource_mounts(
    session: dict[str, Any], files: FileService, skills: SkillService
) -> list[Mount]:
    """Read-only mounts of the session's file resources and its agent's skills (the latter at
    `/mnt/skills/<name>`: a mount point is never inside /workspace, which the sandbox writes)."""
    mounts = []
    for resource in session.get("resources") or []:
        if resource.get("type") == "file":
            body = await files.get_body(resource["file_id"])
            mounts.append(
                Mount(
                    host_path=files.blobs.path(body["sha256"]),
                    sandbox_path=resource["mount_path"],
                    read_only=True,
                )
            )
    for ref in session["agent"].get("skills") or []:
        skill = await skills.materialize(ref["skill_id"], ref["version"])
        mounts.append(
            Mount(
                host_path=skill.host_dir,
                sandbox_path=f"{SKILLS_DIR}/{skill.name}",
                read_only=True,
            )
        )
    return mounts
