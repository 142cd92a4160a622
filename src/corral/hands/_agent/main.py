"""The in-sandbox agent: a long-lived process that runs tool calls sent by the host over a pipe.

Started by bwrap at provision; reads frames on fd 0 and answers on fd 1 (see `wire`). It runs
with exactly the sandbox's privileges and must never be trusted by the host. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from typing import Any

from . import filetools
from .shell import Shell
from .wire import (
    FrameReader,
    encode_request,
    encode_response,
    parse_response_header,
    write_all,
)

GREP_SECONDS = 30


def boot_code(agent_root: str, entry: str) -> str:
    """`python -c` code that runs `_agent.main.<entry>()` from the directory holding `_agent/`."""
    return f"import sys;sys.path.insert(0,{agent_root!r});from _agent.main import {entry};{entry}()"


class Agent:
    """Holds the shell and the file view of one sandbox."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.workdir: str = config["workdir"]
        self.limits: dict[str, int] = config["limits"]
        ro = [(p, p, True) for p in config.get("read_only", ())]
        self.view = filetools.View(self.workdir, ro)
        proxy = config.get("proxy")
        self.proxy_port: int | None = int(proxy["port"]) if proxy else None
        self.shell = Shell(os.environ, self.limits, self.workdir, sandboxed=True)
        self.shell.start()

    def handle(self, request: dict[str, Any]) -> bytes:
        tool, tool_input = request.get("tool"), request.get("input")
        if not isinstance(tool_input, dict):
            return encode_response("text", b"input must be an object", is_error=True)
        try:
            if tool == "bash":
                text, is_error = self.bash(tool_input, float(request["timeout"]))
            elif tool == "grep":
                return self.grep(request)
            elif tool == "web_fetch":
                from . import webfetch  # http.client + ssl cost ~15 ms: only when used

                limit = self.limits["output_bytes"]
                text, is_error = webfetch.run(tool_input, self.proxy_port, limit), False
            elif tool == "__reap":  # the host saw forks fail at pids.max
                text, is_error = self.shell.reap(), False
            else:
                result = filetools.run(self.view, str(tool), tool_input)
                if isinstance(result, filetools.Binary):
                    kind = "document" if result.media_type == "application/pdf" else "image"
                    return encode_response(kind, result.data, media=result.media_type)
                text, is_error = result, False
        except filetools.ToolFailure as e:
            text, is_error = str(e), True
        except Exception as e:  # the agent must outlive any one bad call
            text, is_error = f"{tool}: internal error: {type(e).__name__}: {e}", True
        return encode_response("text", text.encode(errors="replace"), is_error=is_error)

    def bash(self, tool_input: dict[str, Any], timeout: float) -> tuple[str, bool]:
        if tool_input.get("restart"):
            self.shell.stop(everything=True)
            self.shell.start()
            return "bash session restarted", False
        command = tool_input.get("command")
        if not isinstance(command, str) or not command.strip():
            return "bash: command is required", True
        return self.shell.run(command, timeout)

    def grep(self, request: dict[str, Any]) -> bytes:
        """Run grep in a child with a CPU limit: a model-written regex can backtrack forever."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        dup2 = os.POSIX_SPAWN_DUP2
        pid = os.posix_spawn(
            sys.executable,
            [sys.executable, "-I", "-S", "-B", "-c", boot_code(_agent_root(), "grep_child")],
            os.environ,
            file_actions=[(dup2, in_r, 0), (dup2, out_w, 1)],
        )
        os.close(in_r)
        os.close(out_w)
        write_all(in_w, encode_request({"workdir": self.workdir, "input": request["input"]}))
        os.close(in_w)
        data = _read_with_deadline(out_r, time.monotonic() + GREP_SECONDS)
        os.close(out_r)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if data is None or not _whole_frame(data):
            message = f"grep: timed out after {GREP_SECONDS}s"
            return encode_response("text", message.encode(), is_error=True)
        return data


def _whole_frame(data: bytes) -> bool:
    """True when `data` is exactly one well-formed frame (a child killed mid-write is not)."""
    header, _, body = data.partition(b"\n")
    try:
        return parse_response_header(header)[3] == len(body)
    except ValueError:
        return False


def _agent_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read_with_deadline(fd: int, deadline: float) -> bytes | None:
    chunks: list[bytes] = []
    while (remaining := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
    return None


def grep_child() -> None:
    """Entry point of the grep child process."""
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (GREP_SECONDS, GREP_SECONDS + 1))
    request = FrameReader(0).read_request() or {}
    view = filetools.View(request["workdir"])
    try:
        text, is_error = filetools.run(view, "grep", request["input"]), False
    except filetools.ToolFailure as e:
        text, is_error = str(e), True
    write_all(1, encode_response("text", str(text).encode(errors="replace"), is_error=is_error))


def main() -> None:
    """Entry point of the agent (pid 2 of the sandbox, under bwrap's init)."""
    import resource

    reader = FrameReader(0)
    config = reader.read_request()
    if config is None:
        return
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    agent = Agent(config)
    proxy = config.get("proxy")
    if proxy:
        from . import forward  # socket + threading cost ~2 ms: only when networking is limited

        forward.start(int(proxy["port"]), str(proxy["socket"]))
    write_all(1, encode_response("ready", str(os.getpid()).encode()))
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 2)
    while (request := reader.read_request()) is not None:
        write_all(1, agent.handle(request))
