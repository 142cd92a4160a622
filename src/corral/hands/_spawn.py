"""Starting one bubblewrap sandbox: host-side parts (proxy, cgroups, mount sources), bwrap,
cgroup placement.

bwrap blocks on `--block-fd` until its init is in the cgroups, and gets an empty environment.
It runs as the sandbox's host uid (`Parts.owner`), never as the server's root; placing it in
its cgroups stays the server's job.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from corral.errors import HandsError
from corral.hands import _bwrap, _cgroup
from corral.hands._agent.wire import encode_request
from corral.hands._channel import new_id
from corral.hands._egress import PACKAGE_MANAGER_HOSTS, EgressProxy, HostPolicy
from corral.hands._gitproxy import GitForwarder
from corral.hands._intercept import Interceptor
from corral.hands._seccomp import build_filter
from corral.hands._sources import Owner, give_to, open_owned_dir, open_source, private_dirs
from corral.hands.base import SandboxRecipe
from corral.netpolicy import EgressSettings

INFRA_TASKS = 16
"""Tasks (bwrap init, agent, shell, proxy relay threads) allowed on top of `max_processes`."""


def check_recipe(recipe: SandboxRecipe) -> None:
    """Create the recipe's directories and refuse mounts that cannot work, or whose mount
    point would lie in a tree the sandbox can write (a read-write mount included): there it
    could swap a parent directory for a symlink before the next provision.

    Raises:
        HandsError: `invalid_recipe`.
    """
    for d in (recipe.workspace, recipe.outputs):
        private_dirs(d)
    writable = [_bwrap.check_sandbox_path(m.sandbox_path) for m in recipe.mounts if not m.read_only]
    for mount in recipe.mounts:
        path = _bwrap.check_sandbox_path(mount.sandbox_path)
        if any(path.startswith(w + "/") for w in writable):
            msg = f"cannot mount at {mount.sandbox_path!r}: inside a read-write mount"
            raise HandsError("invalid_recipe", msg, retryable=False)
        if not mount.host_path.exists():
            msg = f"mount source {mount.host_path} does not exist"
            raise HandsError("invalid_recipe", msg, retryable=False)


class Parts:
    """Host-side resources of one sandbox (egress proxy, cgroups, fds of its mount sources),
    released together."""

    def __init__(
        self, *, sandbox_id: str, owner: Owner, leftovers: list[_cgroup.SandboxCgroup]
    ) -> None:
        self.sandbox_id = sandbox_id
        self.owner = owner
        """(uid, gid) the sandbox runs as on the host; it owns the workspace and outputs."""
        self._leftovers = leftovers
        """Where cgroups that would not go away yet are left for a later `remove()`."""
        self.sources: dict[str, int] = {}
        """fds of the mount sources, keyed as `_bwrap.build_args` reads them."""
        self.run_dir: Path | None = None
        self.proxy: EgressProxy | None = None
        self.git: GitForwarder | None = None
        self.cgroup: _cgroup.SandboxCgroup | None = None
        self._released = False

    async def make(
        self,
        layout: _bwrap.HostLayout,
        recipe: SandboxRecipe,
        cgroups: _cgroup.CgroupSetup | None,
        egress: EgressSettings | None = None,
        git: GitForwarder | None = None,
    ) -> None:
        """Start the egress proxy (any networking but `none`, or with `git`, the recipe's
        repositories' forwarder) with the operator's `egress` settings, and create the
        cgroups."""
        net = recipe.networking
        self.git = git
        if net.type != "none" or git is not None:  # with `none`, only git's name is served
            extra = PACKAGE_MANAGER_HOSTS if net.allow_package_managers else ()
            self.run_dir = layout.state_dir / "run" / self.sandbox_id
            self.run_dir.mkdir()
            hosts = [*net.allowed_hosts, *extra] if net.type != "none" else []
            policy = HostPolicy(hosts, public=net.type == "unrestricted")
            interceptor = None
            if recipe.interception is not None:
                interceptor = Interceptor(recipe.interception, scratch=self.run_dir)
                _write_trust(self.run_dir, layout.etc_dir, recipe.interception.ca_cert_pem)
            self.proxy = EgressProxy(policy, settings=egress, interceptor=interceptor, git=git)
            await self.proxy.start(self.run_dir / "egress.sock")
            give_to(self.run_dir / "egress.sock", self.owner)  # connecting needs write access
        await anyio.to_thread.run_sync(self._open_sources, recipe)
        if cgroups is not None:
            try:
                self.cgroup = cgroups.create(
                    self.sandbox_id,
                    memory_bytes=recipe.limits.memory_bytes,
                    max_tasks=recipe.limits.max_processes + INFRA_TASKS,
                )
            except OSError as e:
                raise HandsError("provision_failed", f"cgroup setup failed: {e}") from e

    def _open_sources(self, recipe: SandboxRecipe) -> None:
        """Fill `sources` (as it goes, so `release` closes whatever was opened)."""
        self.sources["src:workspace"] = open_owned_dir(recipe.workspace, self.owner)
        self.sources["src:outputs"] = open_owned_dir(recipe.outputs, self.owner)
        for i, mount in enumerate(recipe.mounts):
            self.sources[f"src:mount{i}"] = (
                open_source(mount.host_path)
                if mount.read_only
                else open_owned_dir(mount.host_path, self.owner)
            )
        if self.run_dir is not None:
            self.sources["src:proxy"] = open_source(self.run_dir / "egress.sock")
            if self.proxy is not None and self.proxy.interceptor is not None:
                for key, name in _bwrap.TRUST_FILES.items():
                    self.sources[key] = open_source(self.run_dir / name)

    def close_sources(self) -> None:
        """Close the sources' fds (bwrap holds its own once started); idempotent."""
        while self.sources:
            os.close(self.sources.popitem()[1])

    async def release(self) -> None:
        """Stop the proxy and remove the cgroups once empty; idempotent."""
        self.close_sources()
        if self._released:
            return
        self._released = True
        if self.proxy is not None:
            await self.proxy.aclose()
        if self.git is not None:
            await self.git.aclose()
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        if self.cgroup is not None:
            self.cgroup.kill_all()
            for _ in range(200):
                if self.cgroup.remove():
                    return
                await anyio.sleep(0.005)
            self._leftovers.append(self.cgroup)


def _write_trust(run_dir: Path, etc_dir: Path, ca_pem: bytes) -> None:
    """The environment's CA alone, and with the system roots the sandbox sees (a bundle
    replacing the default must still verify every other host)."""
    system = etc_dir / "ssl" / "certs" / "ca-certificates.crt"
    if not system.is_file():
        system = Path(ssl.get_default_verify_paths().openssl_cafile)
    roots = system.read_bytes() if system.is_file() else b""
    (run_dir / "corral-ca.crt").write_bytes(ca_pem)
    (run_dir / "ca-bundle.crt").write_bytes(roots.rstrip(b"\n") + b"\n" + ca_pem)
    for name in ("corral-ca.crt", "ca-bundle.crt"):
        os.chmod(run_dir / name, 0o644)


@dataclass(frozen=True, slots=True, kw_only=True)
class Spawned:
    """A started bwrap: its process, the sandbox init's host pid and pidfd, and the host end
    of the agent's channel (whose first frame answers request `ready_id`)."""

    proc: asyncio.subprocess.Process
    init_pid: int
    init_fd: int
    channel: socket.socket
    ready_id: str


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


async def _read_info(fd: int) -> int:
    """The sandbox init's host pid from bwrap's `--info-fd` JSON (takes ownership of fd)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        data = await reader.readuntil(b"}")
    finally:
        transport.close()
    return int(json.loads(data)["child-pid"])


async def spawn(layout: _bwrap.HostLayout, recipe: SandboxRecipe, parts: Parts) -> Spawned:
    """Start bwrap, place the sandbox in its cgroups, then let it run the agent.

    Raises:
        HandsError: `provision_failed` when bwrap gives up before reporting its child.
    """
    proxy_socket = parts.run_dir / "egress.sock" if parts.run_dir else None
    env = _bwrap.sandbox_env(recipe, proxy=proxy_socket is not None)
    if "src:ca-bundle" in parts.sources:
        env.update(_bwrap.TRUST_ENV)
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe() if parts.cgroup else (-1, -1)
    # The agent's protocol runs over this socket, never over stdio a command could reach.
    channel, agent_end = socket.socketpair()
    fds = {"seccomp": _memfd("seccomp", build_filter()), "info": info_w}
    fds["channel"] = agent_end.detach()
    if parts.cgroup:
        fds["block"] = block_r
    try:
        args = _bwrap.build_args(layout, recipe, env=env, fds={**fds, **parts.sources})
        fds["args"] = _memfd("bwrap-args", b"".join(a.encode() + b"\0" for a in args))
        proc = await asyncio.create_subprocess_exec(
            *_bwrap.launch(layout, parts.owner, parts.sources), "--args", str(fds["args"]),
            *_bwrap.command(layout),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, env={}, cwd="/",
            pass_fds=(*fds.values(), *parts.sources.values(), *layout.fds),
            # Out of the server's process group: Ctrl+C's SIGINT is the server's to handle
            # (a graceful stop lets the running call finish); --die-with-parent still ends
            # the sandbox with the server.
            start_new_session=True,
        )  # fmt: skip
    except BaseException:
        channel.close()
        os.close(info_r)
        if block_w >= 0:
            os.close(block_w)
        raise
    finally:
        for fd in fds.values():
            os.close(fd)
    try:
        return await _release(proc, info_r, block_w, recipe, parts, (channel, fds["channel"]))
    except BaseException:
        channel.close()
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        raise


async def _release(
    proc: asyncio.subprocess.Process,
    info_r: int,
    block_w: int,
    recipe: SandboxRecipe,
    parts: Parts,
    channel: tuple[socket.socket, int],
) -> Spawned:
    try:
        assert proc.stdin is not None
        ready_id = new_id()
        config = agent_config(recipe, parts, channel_fd=channel[1], ready_id=ready_id)
        proc.stdin.write(encode_request(config))
        proc.stdin.close()  # stdin carries only the configuration
        try:
            init_pid = await _read_info(info_r)
        except (asyncio.IncompleteReadError, ValueError, KeyError) as e:
            await proc.wait()
            assert proc.stderr is not None
            err = (await proc.stderr.read(4096)).decode(errors="replace").strip()
            msg = f"bubblewrap failed: {err or e}"
            raise HandsError("provision_failed", msg, retryable=False) from None
        init_fd = os.pidfd_open(init_pid)
        if parts.cgroup:
            parts.cgroup.attach(init_pid)
            os.write(block_w, b"1")
        return Spawned(
            proc=proc, init_pid=init_pid, init_fd=init_fd, channel=channel[0], ready_id=ready_id
        )
    finally:
        if block_w >= 0:
            os.close(block_w)


def agent_config(
    recipe: SandboxRecipe, parts: Parts, *, channel_fd: int, ready_id: str
) -> dict[str, Any]:
    """The first frame the agent reads (on stdin): where it works, which limits it applies,
    the fd of its channel and the id its ready frame must carry."""
    limits = recipe.limits
    proxy = {"port": _bwrap.PROXY_PORT, "socket": _bwrap.PROXY_SOCKET} if parts.proxy else None
    return {
        "id": ready_id,
        "channel_fd": channel_fd,
        "workdir": _bwrap.WORKDIR,
        "read_only": [m.sandbox_path for m in recipe.mounts if m.read_only],
        "limits": {
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "max_processes": limits.max_processes,
            "output_bytes": limits.output_bytes,
            "disk_bytes": limits.disk_bytes,
            "rlimit_as": parts.cgroup is None,
        },
        "proxy": proxy,
    }
