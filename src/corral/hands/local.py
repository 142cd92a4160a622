"""`LocalHands`: one bubblewrap sandbox per session, each running a long-lived in-sandbox agent.

The host side only spawns, frames calls, enforces deadlines and kills; it trusts nothing the
sandbox sends back and passes in nothing of the server's environment, files or credentials.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import shutil
import signal
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from corral.errors import HandsError
from corral.hands import _bwrap, _cgroup, _usage
from corral.hands._agent.wire import encode_request
from corral.hands._channel import Channel, ProtocolError, new_id
from corral.hands._gitproxy import GitForwarder, TokenSource
from corral.hands._seccomp import SeccompUnsupported, build_filter
from corral.hands._sources import Owner
from corral.hands._spawn import Parts, Spawned, check_recipe, spawn
from corral.hands._uids import UidAllocator, UidRange
from corral.hands.base import SandboxRecipe, ToolOutput
from corral.netpolicy import AddressPolicy, EgressSettings
from corral.tools.builtin import SANDBOX_TOOLS

_GRACE_SECONDS = 10.0
_START_TIMEOUT = 30.0
_GREP_BUDGET = 35.0
_MEDIA = {"image": {"image/png", "image/jpeg", "image/gif", "image/webp"},
          "document": {"application/pdf"}}  # fmt: skip
_WRITERS = frozenset({"bash", "write", "edit"})
"""Tools after which the disk quota is checked."""
_BLOCKED_OVER_QUOTA = frozenset({"write", "edit"})
"""Tools refused while over quota (bash stays usable so `rm` and `du` can fix it)."""


DEFAULT_UID_RANGE = UidRange(1_879_048_192, 1_879_113_727)
"""0x70000000-0x7000ffff: see `corral.config.Settings.sandbox_uid_range`."""


class LocalHands:
    """Provider of bubblewrap sandboxes under `root_dir` (one per session, provisioned lazily).

    `root_dir` (mode 0700) holds only this provider's state (a generated /etc, the agent,
    proxy sockets, the sessions' uids); it is never visible inside a sandbox except for those
    pieces. When the server runs as root, each session's sandbox runs on the host as a uid of
    its own from `uid_range`; otherwise as the server's user.
    """

    def __init__(
        self,
        root_dir: Path,
        bwrap: str = "bwrap",
        *,
        python: str = "/usr/bin/python3",
        use_cgroups: bool = True,
        egress: EgressSettings | None = None,
        uid_range: UidRange = DEFAULT_UID_RANGE,
        git_tokens: TokenSource | None = None,
    ) -> None:
        self._git_tokens = git_tokens
        """Repository resource id -> current token, for the sandboxes' git forwarders."""
        self._egress = egress or EgressSettings()
        """The operator's egress settings, for every sandbox's proxy."""
        self._root_dir = root_dir
        self._uids = UidAllocator(root_dir / "uids", uid_range) if os.geteuid() == 0 else None
        self._bwrap = bwrap
        self._python = python
        self._use_cgroups = use_cgroups
        self._layout: _bwrap.HostLayout | None = None
        self._cgroups: _cgroup.CgroupSetup | None = None
        self._prepare_lock = anyio.Lock()
        self._sandboxes: set[LocalSandbox] = set()
        self._leftover_cgroups: list[_cgroup.SandboxCgroup] = []
        self._closed = False

    @property
    def enforcement(self) -> str:
        """How pids/memory are limited: "cgroup-v1", "cgroup-v2" or "rlimit" (weaker)."""
        return self._cgroups.name if self._cgroups else "rlimit"

    async def _prepare(self) -> _bwrap.HostLayout:
        async with self._prepare_lock:
            if self._layout is None:
                try:
                    build_filter()
                except SeccompUnsupported as e:
                    raise HandsError("seccomp_unsupported", str(e), retryable=False) from e
                self._layout = await anyio.to_thread.run_sync(
                    _bwrap.prepare, self._root_dir, self._bwrap, self._python
                )
                if self._use_cgroups:
                    self._cgroups = await anyio.to_thread.run_sync(_cgroup.detect)
            return self._layout

    async def owner(self, session_id: str) -> Owner:
        """Who the session's sandbox is on the host (its files must belong to it)."""
        return await self._owner(session_id)

    def _git_forwarder(self, recipe: SandboxRecipe) -> GitForwarder | None:
        if not recipe.repositories or self._git_tokens is None:
            return None
        policy = AddressPolicy.from_entries(self._egress.allow_private)
        return GitForwarder(recipe.repositories, self._git_tokens, policy)

    async def _owner(self, session_id: str) -> Owner:
        """Who the session's sandbox is on the host: its own uid (and gid of the same
        number) when the server is root, else the server's user."""
        if self._uids is None:
            return os.geteuid(), os.getegid()
        uid = await anyio.to_thread.run_sync(self._uids.allocate, session_id)
        return uid, uid

    async def free_uid(self, session_id: str) -> None:
        """Give a deleted session's host uid back to the range (no-op when not root).

        Call after its sandbox is destroyed and its workspace and outputs are removed: the
        next session given the uid would own whatever files of it are left.
        """
        if self._uids is not None:
            await anyio.to_thread.run_sync(self._uids.free, session_id)

    async def provision(self, recipe: SandboxRecipe) -> LocalSandbox:
        """Start a sandbox for `recipe`; returns once its agent is ready for tool calls.

        Raises:
            HandsError: `bwrap_missing`, `python_missing`, `invalid_recipe`,
                `provision_failed` or `closed`.
        """
        if self._closed:
            raise HandsError("closed", "this LocalHands was closed", retryable=False)
        layout = await self._prepare()
        check_recipe(recipe)
        owner = await self._owner(recipe.session_id)
        self._leftover_cgroups[:] = [c for c in self._leftover_cgroups if not c.remove()]
        parts = Parts(
            sandbox_id=f"sbx_{secrets.token_hex(8)}", owner=owner, leftovers=self._leftover_cgroups
        )
        try:
            git = self._git_forwarder(recipe)
            await parts.make(layout, recipe, self._cgroups, self._egress, git)
            spawned = await spawn(layout, recipe, parts)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await parts.release()
            raise
        finally:
            parts.close_sources()  # bwrap has its own copies
        sandbox = LocalSandbox(recipe=recipe, parts=parts, spawned=spawned)
        try:
            with anyio.fail_after(_START_TIMEOUT):
                await sandbox._wait_ready()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await sandbox._kill()
            raise
        sandbox._on_destroy = self._sandboxes.discard
        self._sandboxes.add(sandbox)
        if self._closed:  # aclose() ran while this sandbox was starting
            await sandbox.destroy()
            raise HandsError("closed", "this LocalHands was closed", retryable=False)
        return sandbox

    async def aclose(self) -> None:
        """Destroy every sandbox and remove this provider's state directory."""
        self._closed = True
        for sandbox in list(self._sandboxes):
            await sandbox.destroy()
        for _ in range(100):
            self._leftover_cgroups[:] = [c for c in self._leftover_cgroups if not c.remove()]
            if not self._leftover_cgroups:
                break
            await anyio.sleep(0.05)
        if self._layout is not None:
            _bwrap.close(self._layout)
            state_dir = self._layout.state_dir
            await anyio.to_thread.run_sync(partial(shutil.rmtree, state_dir, ignore_errors=True))


class LocalSandbox:
    """One running bubblewrap sandbox; see `Sandbox`."""

    def __init__(self, *, recipe: SandboxRecipe, parts: Parts, spawned: Spawned) -> None:
        self.id = parts.sandbox_id
        self.recipe = recipe
        self.init_pid = spawned.init_pid
        """Host pid of the sandbox's PID-namespace init (bwrap's child)."""
        self._parts = parts
        self._proc = spawned.proc
        self._init_fd = spawned.init_fd
        self._channel = Channel(spawned.channel)
        self._ready_id = spawned.ready_id
        self._over_quota = True
        """Until measured: a new sandbox may start on a workspace an earlier one filled."""
        self._lock = anyio.Lock()
        self._dead = False
        self._destroyed = False
        self._fork_failures = 0
        self._on_destroy: Any = None

    @property
    def alive(self) -> bool:
        return not (self._dead or self._destroyed) and self._proc.returncode is None

    async def _wait_ready(self) -> None:
        assert self._proc.stderr is not None
        try:
            frame = await self._channel.read_frame(self._ready_id)
            problem = "" if frame.kind == "ready" else f"{frame.kind} frame instead of ready"
        except (EOFError, OSError, ProtocolError) as e:
            problem = str(e) or "the agent exited"
        if not problem:
            return
        with anyio.move_on_after(2):
            await self._proc.wait()
        err = (await self._proc.stderr.read(4096)).decode(errors="replace").strip()
        raise HandsError("provision_failed", f"sandbox failed to start: {err or problem}",
                         retryable=False)  # fmt: skip

    async def execute(self, name: str, input: dict[str, Any]) -> ToolOutput:
        """Run a built-in tool in the sandbox; see `Sandbox.execute`."""
        if name not in SANDBOX_TOOLS:
            return ToolOutput.text(f"{name} is not a sandbox tool", is_error=True)
        timeout = _tool_timeout(name, input, self.recipe.limits.wall_seconds)
        frame_id = new_id()
        try:
            request = encode_request(
                {"id": frame_id, "tool": name, "input": input, "timeout": timeout}
            )
        except ValueError:
            return ToolOutput.text(f"{name}: input must be a JSON object", is_error=True)
        async with self._lock:
            if not self.alive:
                raise self._died()
            if self._over_quota and name in _BLOCKED_OVER_QUOTA:
                note = await self._check_disk()
                if note is not None:
                    return ToolOutput.text(f"{name}: {note}", is_error=True)
            cgroup = self._parts.cgroup
            if cgroup is None:
                output = await self._call(request, frame_id, timeout)
            else:
                output = await self._call_watched(cgroup, request, frame_id, timeout)
            if name in _WRITERS and (note := await self._check_disk()) is not None:
                output = _with_note(output, note)
            return output

    async def _check_disk(self) -> str | None:
        """The quota note if /workspace and outputs together use more than `disk_bytes`."""
        roots = (self.recipe.workspace, self.recipe.outputs)
        usage = await anyio.to_thread.run_sync(_usage.measure, roots)
        note = _usage.over_quota(usage, self.recipe.limits.disk_bytes)
        self._over_quota = note is not None
        return note

    async def _call_watched(
        self, cgroup: _cgroup.SandboxCgroup, request: bytes, frame_id: str, timeout: float
    ) -> ToolOutput:
        """`_call`, plus what the cgroup says happened: OOM kills, forks refused at pids.max."""
        notes = await self._contain_fork_bomb(cgroup, "earlier commands")
        ooms = cgroup.oom_kills()
        output = await self._call(request, frame_id, timeout)
        if cgroup.oom_kills() > ooms:
            notes.append(
                f"the sandbox ran out of memory (limit {self._mib()} MiB); "
                "the kernel killed a process"
            )
        notes += await self._contain_fork_bomb(cgroup, "this command")
        for note in notes:
            if "process limit" not in note or "process limit" not in _text(output):
                output = _with_note(output, note)
        return output

    async def _contain_fork_bomb(self, cgroup: _cgroup.SandboxCgroup, who: str) -> list[str]:
        """After forks failed at the limit, kill everything but the shell: nothing else can run."""
        if cgroup.fork_failures() == self._fork_failures:
            return []
        reap_id = new_id()
        reap = encode_request({"id": reap_id, "tool": "__reap", "input": {}, "timeout": 10.0})
        await self._call(reap, reap_id, 10.0)
        self._fork_failures = cgroup.fork_failures()
        limit = self.recipe.limits.max_processes
        return [
            f"{who} hit the process limit of {limit}: every process in the sandbox except "
            "the shell was killed"
        ]

    async def _call(self, request: bytes, frame_id: str, timeout: float) -> ToolOutput:
        try:
            with anyio.fail_after(timeout + _GRACE_SECONDS):
                await self._channel.send(request)
                return await self._read_output(frame_id)
        except TimeoutError:
            await self._fail()
            msg = "the sandbox stopped answering and was killed"
            raise HandsError("sandbox_unresponsive", msg) from None
        except ProtocolError as e:
            await self._fail()
            msg = f"the sandbox sent an answer out of step with the call ({e}) and was killed"
            raise HandsError("sandbox_protocol", msg) from None
        except (OSError, EOFError, ValueError):
            error = self._died()  # before _fail() removes the cgroup that says why
            await self._fail()
            raise error from None
        except BaseException:
            # cancelled mid-call: the agent is still busy with it, so the pipe is out of step
            with anyio.CancelScope(shield=True):
                await self._fail()
            raise

    async def _read_output(self, frame_id: str) -> ToolOutput:
        frame = await self._channel.read_frame(frame_id)
        if frame.kind == "text":
            return ToolOutput.text(frame.body.decode(errors="replace"), is_error=frame.is_error)
        if frame.media not in _MEDIA.get(frame.kind, ()):
            raise ProtocolError(f"unexpected {frame.kind} frame")
        data = base64.standard_b64encode(frame.body).decode("ascii")
        source = {"type": "base64", "media_type": frame.media, "data": data}
        return ToolOutput(content=[{"type": frame.kind, "source": source}], is_error=frame.is_error)

    def _mib(self) -> int:
        return self.recipe.limits.memory_bytes // 2**20

    def _died(self) -> HandsError:
        cgroup = self._parts.cgroup
        why = "killed, out of memory, or `kill -1` from inside"
        if cgroup and cgroup.oom_kills():
            why = f"out of memory: limit {self._mib()} MiB"
        return HandsError("sandbox_died", f"the sandbox died ({why}); files under /workspace are "
                                          "kept and a new sandbox can be provisioned")  # fmt: skip

    async def _fail(self) -> None:
        self._dead = True
        await self._kill()

    async def _kill(self) -> None:
        """SIGKILL the namespace's init: the kernel then kills every process of the sandbox."""
        init_fd, self._init_fd = self._init_fd, -1
        if init_fd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(init_fd, signal.SIGKILL)
            os.close(init_fd)
        if self._proc.returncode is None:
            with anyio.move_on_after(2):
                await self._proc.wait()
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()
        self._channel.close()
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        await self._parts.release()

    async def destroy(self) -> None:
        """Kill every process of the sandbox; idempotent. Files under the workspace stay."""
        if self._destroyed:
            return
        self._destroyed = True
        with anyio.CancelScope(shield=True):
            await self._kill()
        if self._on_destroy is not None:
            self._on_destroy(self)


def _tool_timeout(name: str, input: dict[str, Any], wall: float) -> float:
    if name != "bash":
        return max(wall, _GREP_BUDGET)
    ms = input.get("timeout_ms") if isinstance(input, dict) else None
    if isinstance(ms, int) and not isinstance(ms, bool) and ms > 0:
        return min(ms / 1000, wall)
    return wall


def _text(output: ToolOutput) -> str:
    return "".join(str(b.get("text", "")) for b in output.content)


def _with_note(output: ToolOutput, note: str) -> ToolOutput:
    blocks = list(output.content)
    if blocks and blocks[-1].get("type") == "text":
        blocks[-1] = {"type": "text", "text": f"{blocks[-1]['text']}\n[{note}]"}
    else:
        blocks.append({"type": "text", "text": f"[{note}]"})
    return ToolOutput(content=blocks, is_error=True)
