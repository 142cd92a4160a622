"""`HandsWorker`: poll an environment's work queue and serve each item's session.

Per item, as the SDK's `EnvironmentWorker` does: ack it, heartbeat its lease with the item's
sessions token while serving, retrieve the session (a terminated one is skipped), download
its skills and memory stores, run its built-in calls (`runner.SessionRunner`) in a
bubblewrap sandbox provisioned on the first call (`corral.hands.pool.SandboxPool` over
`corral.hands.local.LocalHands`, the cloud path's own pool and hands), then destroy the
sandbox (the workspace stays on this machine), sync memory a last time and force-stop the
item, unless the lease was lost: then the item is the queue's or another worker's, and this
worker leaves it alone. Items are served concurrently up to `capacity`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import random
import secrets
import socket
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import anyio

from corral.hands.base import (
    SKILLS_DIR,
    Hands,
    Limits,
    Mount,
    Networking,
    SandboxRecipe,
    ToolOutput,
)
from corral.hands.pool import SandboxPool
from corral.hands.workspaces import SessionDirs
from corral.selfhosted import lease as leases
from corral.selfhosted.memory import MemorySync
from corral.selfhosted.runner import SessionRunner
from corral.service.skill_bundle import unpack

log = logging.getLogger("corral.selfhosted")
BLOCK_MS = 999
_EMPTY_SLEEP = (1.0, 3.0)
_BACKOFF_MAX = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """How this worker runs sandboxes and talks to the server."""

    url: str
    environment_id: str
    environment_key: str
    workdir: Path
    """Holds each session's workspace, outputs, skills and memory (kept across items)."""
    networking: Networking = field(default_factory=Networking)
    """Egress policy of every sandbox, enforced on this machine."""
    limits: Limits = field(default_factory=Limits)
    max_idle: float = 60.0
    """Leave a session idle (not waiting on a tool) for this long."""
    capacity: int = 4
    """Sessions served at once."""
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{secrets.token_hex(6)}")


def sessions_token(secret: str | None) -> str | None:
    """The `sessions_token` inside a poll's `secret` (URL-safe base64 JSON), if any."""
    if not secret:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(secret + "=" * (-len(secret) % 4)))
    except (ValueError, binascii.Error):
        return None
    token = payload.get("sessions_token") if isinstance(payload, dict) else None
    return token if isinstance(token, str) and token else None


class _NoHold:
    """The session directory needs no cross-process lock here: one worker owns `workdir`."""

    def release(self) -> None:
        """Nothing to release."""


class HandsWorker:
    """Serves one self-hosted environment's work items with sandboxes from `hands`."""

    def __init__(self, config: WorkerConfig, hands: Hands) -> None:
        self.config = config
        self.hands = hands
        self.dirs = SessionDirs(config.workdir / "sessions")
        self._recipes: dict[str, SandboxRecipe] = {}
        self._memory: dict[str, MemorySync] = {}
        self.pool = SandboxPool(
            hands,
            self._recipe_for,
            standings=self._standings,
            hold=self._hold,
            purge=self._purge,
            idle_seconds=config.max_idle,
            after_execute=self._after_execute,
        )
        self._serving: set[str] = set()
        self._limiter = anyio.Semaphore(config.capacity)

    def _client(self, token: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            base_url=self.config.url,
            api_key=None,
            auth_token=token,
            max_retries=2,
            default_headers={"anthropic-worker-id": self.config.worker_id},
        )

    # ---- the pool's view of sessions ---------------------------------------------------

    async def _recipe_for(self, session_id: str) -> SandboxRecipe:
        return self._recipes[session_id]

    async def _standings(self, session_ids: Sequence[str]) -> Mapping[str, str | None]:
        # A session's sandbox is made once per item from the recipe prepared for it.
        return dict.fromkeys(session_ids, "item")

    async def _hold(self, session_id: str) -> _NoHold:
        return _NoHold()

    async def _purge(self, session_id: str) -> bool:
        return False  # this machine's files of a session are kept for its next item

    async def _after_execute(self, recipe: SandboxRecipe) -> list[str]:
        memory = self._memory.get(recipe.session_id)
        return await memory.sync() if memory is not None else []

    # ---- polling -----------------------------------------------------------------------

    async def run(self) -> None:
        """Poll and serve until cancelled.

        Raises:
            anthropic.APIStatusError: the server refused a poll for good (a 4xx such as a
                revoked key or an unknown environment); sessions being served are left.
        """
        client = self._client(self.config.environment_key)
        backoff = 1.0
        fatal: anthropic.APIStatusError | None = None
        async with anyio.create_task_group() as tg:
            while fatal is None:
                await self._limiter.acquire()
                try:
                    item: Any = await client.beta.environments.work.poll(
                        self.config.environment_id,
                        block_ms=BLOCK_MS,
                        anthropic_worker_id=self.config.worker_id,
                    )
                except anthropic.APIStatusError as exc:
                    self._limiter.release()
                    if exc.status_code < 500 and exc.status_code not in (408, 429):
                        fatal = exc  # a bad key or environment: retrying will not help
                        tg.cancel_scope.cancel()
                        break
                    log.warning("poll failed (%s); retrying in %.0fs", exc.status_code, backoff)
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
                    continue
                except anthropic.APIConnectionError as exc:
                    self._limiter.release()
                    log.warning("poll failed (%s); retrying in %.0fs", exc, backoff)
                    await anyio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
                    continue
                backoff = 1.0
                if item is None:
                    self._limiter.release()
                    await anyio.sleep(random.uniform(*_EMPTY_SLEEP))
                    continue
                tg.start_soon(self._claimed, client, item)
        if fatal is not None:
            raise fatal

    async def _claimed(self, client: anthropic.AsyncAnthropic, item: Any) -> None:
        try:
            work = client.beta.environments.work
            try:
                await work.ack(item.id, environment_id=item.environment_id)
            except anthropic.APIStatusError as exc:
                log.warning("work %s: ack refused (%s)", item.id, exc.status_code)
                return
            await self.serve(item)
        except Exception:
            log.exception("work %s failed", item.id)
        finally:
            self._limiter.release()

    async def serve(self, item: Any) -> leases.Lease:
        """Serve one acked item until its session needs no more hands or its lease ends."""
        lease = leases.Lease()
        token = sessions_token(item.secret)
        if token is None or item.data.type != "session":
            log.error("work %s: no sessions token in its secret, or not a session", item.id)
            await self._stop(self._client(self.config.environment_key), item)
            return lease
        client = self._client(token)
        session_id = item.data.id
        if session_id in self._serving:  # cannot happen with one live item per session
            log.warning("work %s: session %s is already served here", item.id, session_id)
            await self._stop(client, item)
            return lease
        self._serving.add(session_id)
        try:
            async with anyio.create_task_group() as tg:

                async def heartbeat() -> None:
                    try:
                        await leases.keep(client, item.environment_id, item.id, lease)
                    finally:
                        tg.cancel_scope.cancel()  # the lease ended: stop serving at once

                tg.start_soon(heartbeat)
                await self._serve_session(client, session_id, item.id)
                lease.finish(leases.End.DONE)
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self._teardown(session_id)
                if lease.lost:
                    log.info("work %s: lease lost; leaving the item alone", item.id)
                else:
                    await self._stop(client, item)
        return lease

    async def _serve_session(
        self, client: anthropic.AsyncAnthropic, session_id: str, work_id: str
    ) -> None:
        session: Any = await client.beta.sessions.retrieve(session_id)
        if session.status == "terminated":
            log.info("work %s: session %s is terminated; nothing to run", work_id, session_id)
            return
        base = self.dirs.path(session_id)
        memory = MemorySync(client, session_id, base / "memory")
        mounts = [*await self._skills(client, session, base / "skills")]
        mounts += await memory.mounts(session)
        self._memory[session_id] = memory
        for sub in ("workspace", "outputs"):
            (base / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        self._recipes[session_id] = SandboxRecipe(
            session_id=session_id,
            workspace=base / "workspace",
            outputs=base / "outputs",
            mounts=tuple(mounts),
            networking=self.config.networking,
            limits=self.config.limits,
        )

        async def execute(name: str, tool_input: dict[str, Any]) -> ToolOutput:
            return await self.pool.execute(session_id, name, tool_input)

        runner = SessionRunner(client, session_id, execute, max_idle=self.config.max_idle)
        log.info("work %s: serving session %s", work_id, session_id)
        await runner.run()

    async def _skills(
        self, client: anthropic.AsyncAnthropic, session: Any, root: Path
    ) -> list[Mount]:
        """Download the agent's skills (read-only at /mnt/skills/<name>, as in the cloud)."""
        mounts = []
        for ref in getattr(session.agent, "skills", None) or []:
            versions = client.beta.skills.versions
            version: Any = await versions.retrieve(ref.version, skill_id=ref.skill_id)
            target = root / str(version.id)
            if not (target / version.name).is_dir():
                response = await versions.download(ref.version, skill_id=ref.skill_id)
                data = await response.read()
                await anyio.to_thread.run_sync(_unpack_bytes, data, target)
            mounts.append(
                Mount(
                    host_path=target / version.name,
                    sandbox_path=f"{SKILLS_DIR}/{version.name}",
                    read_only=True,
                )
            )
        return mounts

    async def _teardown(self, session_id: str) -> None:
        """Destroy the session's sandbox (files stay), then save its memory a last time."""
        try:
            await self.pool.discard(session_id)
            memory = self._memory.pop(session_id, None)
            if memory is not None:
                with anyio.move_on_after(30):
                    await memory.sync()
        except Exception:
            log.exception("tearing down session %s", session_id)
        finally:
            self._recipes.pop(session_id, None)
            self._serving.discard(session_id)

    async def _stop(self, client: anthropic.AsyncAnthropic, item: Any) -> None:
        """Force-stop an item this worker is done with, so the session's next input queues a
        fresh one at once (an item left live would wait for its lease to expire). Retried
        while the server is unreachable, for a while."""
        delay = 1.0
        for _ in range(6):
            try:
                await client.beta.environments.work.stop(
                    item.id, environment_id=item.environment_id, force=True
                )
                return
            except anthropic.APIStatusError as exc:
                if exc.status_code < 500:  # 409: already stopped; 401: it stopped and its
                    if exc.status_code != 409:  # token died with it
                        log.warning("work %s: force-stop refused (%s)", item.id, exc.status_code)
                    return
                log.warning("work %s: force-stop failed (%s)", item.id, exc.status_code)
            except anthropic.APIConnectionError as exc:
                log.warning("work %s: force-stop failed (%s)", item.id, exc)
            await anyio.sleep(delay)
            delay = min(delay * 2, 15.0)

    async def aclose(self) -> None:
        """Destroy every sandbox."""
        await self.pool.aclose()


def _unpack_bytes(data: bytes, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".zip") as archive:
        archive.write(data)
        archive.flush()
        unpack(Path(archive.name), target)
