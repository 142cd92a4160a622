"""`ScriptedHands`: an in-process fake `Hands` FOR TESTS ONLY; it isolates NOTHING.

Tools run on the host over the recipe's plain directories; never give it untrusted commands.
"""

from __future__ import annotations

import base64
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.to_thread

from corral.errors import HandsError
from corral.hands._agent import filetools
from corral.hands._agent.shell import Shell, descendants
from corral.hands.base import SandboxRecipe, ToolOutput
from corral.tools.builtin import SANDBOX_TOOLS

Handler = Callable[[dict[str, Any]], ToolOutput | Awaitable[ToolOutput]]
"""A scripted tool: gets the tool input, returns (or awaits) the output."""

WORKDIR = "/workspace"
OUTPUTS_DIR = "/mnt/session/outputs"


class ScriptedHands:
    """Test-only `Hands` over plain directories; `handlers` override tools by name.

    Paths given to the file tools are sandbox paths (`/workspace/...`, relative ones resolve
    there) mapped onto the recipe's directories; bash runs on the host in the workspace
    directory and sees host paths.
    """

    def __init__(self, handlers: Mapping[str, Handler] | None = None) -> None:
        self.handlers = dict(handlers or {})
        self.sandboxes: list[ScriptedSandbox] = []
        """Every sandbox provisioned so far, in order (for test assertions)."""

    async def provision(self, recipe: SandboxRecipe) -> ScriptedSandbox:
        """A new fake sandbox over `recipe`'s directories (created if missing)."""
        for d in (recipe.workspace, recipe.outputs):
            d.mkdir(parents=True, exist_ok=True)
        sandbox = ScriptedSandbox(recipe, self.handlers)
        self.sandboxes.append(sandbox)
        return sandbox

    async def aclose(self) -> None:
        for sandbox in self.sandboxes:
            await sandbox.destroy()


class ScriptedSandbox:
    """One fake sandbox; `kill()` simulates the sandbox dying under a running call."""

    def __init__(self, recipe: SandboxRecipe, handlers: Mapping[str, Handler]) -> None:
        self.recipe = recipe
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._handlers = handlers
        self._lock = anyio.Lock()
        self._dead = False
        self._destroyed = False
        self._died = anyio.Event()
        mounts = [
            (WORKDIR, str(recipe.workspace.resolve()), False),
            (OUTPUTS_DIR, str(recipe.outputs.resolve()), False),
            *((m.sandbox_path, str(m.host_path.resolve()), m.read_only) for m in recipe.mounts),
        ]
        self._view = filetools.View(WORKDIR, mounts, strict=True)
        self._shell: Shell | None = None
        self._busy = False

    @property
    def alive(self) -> bool:
        return not (self._dead or self._destroyed)

    def kill(self) -> None:
        """Simulate sudden death: the running and every later call raise `sandbox_died`."""
        self._dead = True
        self._died.set()
        self._signal_shell()

    async def execute(self, name: str, input: dict[str, Any]) -> ToolOutput:
        """Run a tool on the host (no isolation); see `Sandbox.execute`."""
        self.calls.append((name, input))
        if not self.alive:
            raise _died()
        result: ToolOutput | None = None
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                nonlocal result
                result = await self._dispatch(name, input)
                tg.cancel_scope.cancel()

            async def watch() -> None:
                await self._died.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(run)
            tg.start_soon(watch)
        if result is None:
            raise _died()
        return result

    async def _dispatch(self, name: str, input: dict[str, Any]) -> ToolOutput:
        handler = self._handlers.get(name)
        if handler is not None:
            out = handler(input)
            return await out if isinstance(out, Awaitable) else out
        if name not in SANDBOX_TOOLS:
            return ToolOutput.text(f"{name} is not a sandbox tool", is_error=True)
        async with self._lock:
            if name == "bash":
                text, is_error = await anyio.to_thread.run_sync(
                    self._bash, input, abandon_on_cancel=True
                )
                return ToolOutput.text(text, is_error=is_error)
            return await anyio.to_thread.run_sync(self._file_tool, name, input)

    def _bash(self, tool_input: dict[str, Any]) -> tuple[str, bool]:
        self._busy = True
        try:
            return self._bash_call(tool_input)
        finally:
            self._busy = False
            if not self.alive:  # killed meanwhile: only this thread may close the shell's fds
                self._stop_shell()

    def _bash_call(self, tool_input: dict[str, Any]) -> tuple[str, bool]:
        shell = self._shell or self._start_shell()
        if tool_input.get("restart"):
            shell.stop(everything=True)
            shell.start()
            return "bash session restarted", False
        command = tool_input.get("command")
        if not isinstance(command, str) or not command.strip():
            return "bash: command is required", True
        ms = tool_input.get("timeout_ms")
        wall = self.recipe.limits.wall_seconds
        timeout = min(ms / 1000, wall) if isinstance(ms, int) and ms > 0 else wall
        return shell.run(command, timeout)

    def _start_shell(self) -> Shell:
        limits = self.recipe.limits
        env = {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.recipe.workspace),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            **self.recipe.env,
        }
        shell_limits = {
            "cpu_seconds": limits.cpu_seconds,
            "memory_bytes": limits.memory_bytes,
            "max_processes": limits.max_processes,
            "output_bytes": limits.output_bytes,
        }
        self._shell = Shell(
            env, shell_limits, str(self.recipe.workspace.resolve()), sandboxed=False
        )
        self._shell.start()
        return self._shell

    def _file_tool(self, name: str, tool_input: dict[str, Any]) -> ToolOutput:
        try:
            result = filetools.run(self._view, name, tool_input)
        except filetools.ToolFailure as e:
            return ToolOutput.text(str(e), is_error=True)
        if isinstance(result, filetools.Binary):
            kind = "document" if result.media_type == "application/pdf" else "image"
            data = base64.standard_b64encode(result.data).decode("ascii")
            source = {"type": "base64", "media_type": result.media_type, "data": data}
            return ToolOutput(content=[{"type": kind, "source": source}])
        return ToolOutput.text(result)

    def _signal_shell(self) -> None:
        shell = self._shell
        if shell is not None and shell.pid:
            for pid in descendants(shell.pid) | {shell.pid}:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def _stop_shell(self) -> None:
        if self._shell is not None:
            self._shell.stop(everything=True)
            self._shell = None

    async def destroy(self) -> None:
        """Stop the shell and its children; idempotent. Files stay."""
        self._destroyed = True
        self._died.set()
        self._signal_shell()
        if not self._busy:
            await anyio.to_thread.run_sync(self._stop_shell)


def _died() -> HandsError:
    return HandsError("sandbox_died", "the (scripted) sandbox died")
