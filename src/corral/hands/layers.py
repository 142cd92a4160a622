"""Environment package layers: pip/npm packages installed once per package spec, then shared.

A layer is `<root>/<sha256 of the spec>/`. It is built by running the installers INSIDE a
sandbox from `Hands` (networking limited to the package registries, the layer bound read-write
at /opt/corral/layer and owned by the build's uid), never on the host, then sealed (root-owned,
writable by no one else, no setuid bits) and mounted read-only into every sandbox whose
environment asks for the same spec. A lock file makes concurrent builders (sessions, processes)
build it once; `<key>.complete`, outside the sandbox's reach, is written last.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from corral.errors import HandsError
from corral.hands._bwrap import BASE_PATH
from corral.hands._sources import seal_tree
from corral.hands.base import Hands, Limits, Mount, Networking, SandboxRecipe, ToolOutput

LAYER_PATH = "/opt/corral/layer"
SUPPORTED = ("pip", "npm")
UNSUPPORTED = ("apt", "cargo", "gem", "go")
LAYER_FORMAT = 1
"""Part of every layer's key: bump it when the layout or the install commands change."""
BUILD_SECONDS = 900
BUILD_LIMITS = Limits(
    cpu_seconds=BUILD_SECONDS,
    memory_bytes=2 * 1024**3,
    max_processes=512,
    wall_seconds=BUILD_SECONDS,
    output_bytes=256 * 1024,
)
_LOCK_POLL_SECONDS = 0.2
_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@dataclass(frozen=True, slots=True, kw_only=True)
class PackageSpec:
    """The packages of one environment (sorted, without duplicates)."""

    pip: tuple[str, ...] = ()
    npm: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, packages: Mapping[str, Any] | None) -> PackageSpec:
        """From an environment's resolved `config.packages`.

        Raises:
            HandsError: `packages_unsupported` for apt/cargo/gem/go lists (environments saved
                before they were refused at create/update time).
        """
        packages = packages or {}
        for kind in UNSUPPORTED:
            if packages.get(kind):
                raise HandsError(
                    "packages_unsupported",
                    f"{kind} packages are not supported by the local sandbox backend; "
                    "update the environment to use pip or npm",
                    retryable=False,
                )
        return cls(
            pip=tuple(sorted({str(p) for p in packages.get("pip") or ()})),
            npm=tuple(sorted({str(p) for p in packages.get("npm") or ()})),
        )

    @property
    def empty(self) -> bool:
        return not (self.pip or self.npm)

    @property
    def key(self) -> str:
        """sha256 of the canonical spec: equal specs share one layer, whichever environment."""
        doc = {"format": LAYER_FORMAT, "pip": list(self.pip), "npm": list(self.npm)}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def layer_mount(layer_dir: Path) -> Mount:
    """The read-only mount of a built layer into a session's sandbox."""
    return Mount(host_path=layer_dir, sandbox_path=LAYER_PATH, read_only=True)


def layer_env() -> dict[str, str]:
    """Environment that makes the layer's packages importable and its commands runnable."""
    return {
        "PYTHONPATH": f"{LAYER_PATH}/python",
        "NODE_PATH": f"{LAYER_PATH}/node/node_modules",
        "PATH": f"{LAYER_PATH}/python/bin:{LAYER_PATH}/node/node_modules/.bin:{BASE_PATH}",
    }


def install_script(spec: PackageSpec) -> str:
    """The bash run in the build sandbox; package strings are quoted, never interpreted."""
    lines = ['fail() { echo "corral: $*"; exit 3; }']
    if spec.pip:
        lines += [
            "/usr/bin/python3 -m pip --version >/dev/null 2>&1 || fail 'pip packages need pip "
            "for /usr/bin/python3 on the host (Debian package python3-pip)'",
            f"/usr/bin/python3 -m pip install --no-input --disable-pip-version-check "
            f"--no-cache-dir --no-warn-script-location --target {LAYER_PATH}/python -- "
            + " ".join(shlex.quote(p) for p in spec.pip)
            + " || fail 'pip install failed'",
        ]
    if spec.npm:
        lines += [
            "command -v npm >/dev/null || fail 'npm packages need npm on the host "
            "(Debian package npm)'",
            f"mkdir -p {LAYER_PATH}/node && npm install --prefix {LAYER_PATH}/node --no-audit "
            "--no-fund --no-update-notifier --loglevel=warn -- "
            + " ".join(shlex.quote(p) for p in spec.npm)
            + " || fail 'npm install failed'",
        ]
    body = "\n".join([*lines, "echo 'corral: layer built'"])
    return f"(\n{body}\n)"  # a subshell: `exit` must not end the tool's persistent shell


class LayerBuilder:
    """Builds and caches package layers under `root` with sandboxes from `hands`."""

    def __init__(self, hands: Hands, root: Path) -> None:
        self._hands = hands
        self.root = root
        self._locks: dict[str, anyio.Lock] = {}
        self.builds = 0
        """Builds started by this builder (tests use it; `<key>.log` counts every process's)."""

    def paths(self, spec: PackageSpec) -> tuple[Path, Path, Path]:
        """`(layer dir, completion marker, build log)` of a spec."""
        key = spec.key
        return self.root / key, self.root / f"{key}.complete", self.root / f"{key}.log"

    async def ensure(self, spec: PackageSpec) -> Path:
        """The built layer of `spec`, building it first if no process has yet.

        Raises:
            HandsError: `package_install_failed` (retryable: the next provision builds again).
        """
        layer, marker, _ = self.paths(spec)
        if marker.exists():
            return layer
        await anyio.to_thread.run_sync(
            lambda: self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        )
        lock = self._locks.setdefault(spec.key, anyio.Lock())
        async with lock, _file_lock(self.root / f"{spec.key}.lock"):
            if not marker.exists():
                await self._build(spec)
        return layer

    async def _build(self, spec: PackageSpec) -> None:
        layer, marker, log = self.paths(spec)
        scratch = self.root / f"{spec.key}.build"
        for stale in (layer, scratch):
            await anyio.to_thread.run_sync(partial(shutil.rmtree, stale, ignore_errors=True))
        layer.mkdir()
        (scratch / "workspace" / "tmp").mkdir(parents=True)
        self.builds += 1
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        _append(log, f"== build of layer {spec.key} at {started}: {json.dumps(_doc(spec))}\n")
        try:
            output = await self._run_installers(spec, layer, scratch)
        finally:
            await anyio.to_thread.run_sync(partial(shutil.rmtree, scratch, ignore_errors=True))
        text = "".join(str(b.get("text", "")) for b in output.content)
        _append(log, text + "\n")
        if output.is_error:
            raise HandsError(
                "package_install_failed",
                "installing the environment's packages failed (full log in the server's data "
                f"directory: layers/{log.name}); last output:\n{text[-2000:]}",
            )
        # The build sandbox is gone; no later sandbox (another uid) may change what it left.
        await anyio.to_thread.run_sync(seal_tree, layer)
        marker.write_text(json.dumps(_doc(spec)) + "\n")

    async def _run_installers(self, spec: PackageSpec, layer: Path, scratch: Path) -> ToolOutput:
        recipe = SandboxRecipe(
            session_id=f"layer-{spec.key[:16]}",
            workspace=scratch / "workspace",
            outputs=scratch / "outputs",
            mounts=(Mount(host_path=layer, sandbox_path=LAYER_PATH, read_only=False),),
            networking=Networking(type="limited", allow_package_managers=True),
            limits=BUILD_LIMITS,
            env=_build_env(),
        )
        sandbox = await self._hands.provision(recipe)
        try:
            command = {"command": install_script(spec), "timeout_ms": BUILD_SECONDS * 1000}
            return await sandbox.execute("bash", command)
        finally:
            await sandbox.destroy()


def _build_env() -> dict[str, str]:
    env = {"TMPDIR": "/workspace/tmp", "PIP_CONFIG_FILE": os.devnull}
    if os.path.isfile(_CA_BUNDLE):  # node trusts only its bundled CAs unless told
        env["NODE_EXTRA_CA_CERTS"] = _CA_BUNDLE
    return env


def _doc(spec: PackageSpec) -> dict[str, list[str]]:
    return {"pip": list(spec.pip), "npm": list(spec.npm)}


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """An exclusive flock, polled so that waiting stays cancellable; released on close/exit."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await anyio.sleep(_LOCK_POLL_SECONDS)
        yield
    finally:
        os.close(fd)
