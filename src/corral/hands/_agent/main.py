"""The in-sandbox agent: a long-lived process that runs tool calls sent by the host over a socket.

Started by bwrap at provision; reads its configuration on fd 0, then frames on the channel fd
the configuration names and answers there (see `wire`). Commands must never reach that channel:
it is close-on-exec, stdio is /dev/null, and the agent is not dumpable, so a process of the same
uid can neither open `/proc/<agent>/fd/*` nor read its memory. It runs with exactly the
sandbox's privileges and must never be trusted by the host. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from typing import Any, NamedTuple

from . import filetools
from .shell import Shell
from .wire import (
    MAX_TEXT_BYTES,
    FrameReader,
    encode_request,
    encode_response,
    parse_response_header,
    valid_id,
    write_all,
)

GREP_SECONDS = 30
_PR_SET_DUMPABLE = 4


class Reply(NamedTuple):
    """One answer before framing: the request's id is added by the main loop."""

    kind: str
    body: bytes
    is_error: bool = False
    media: str = "-"

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> Reply:
        body = text.encode(errors="replace")
        if len(body) > MAX_TEXT_BYTES:  # the host refuses longer frames
            note = b"\n[output truncated to %d bytes]" % MAX_TEXT_BYTES
            body = body[: MAX_TEXT_BYTES - len(note)] + note
        return cls("text", body, is_error)


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

    def answer(self, request: dict[str, Any]) -> bytes:
        """The framed reply to `request`, carrying its id (a bad id gets `0`: the host then
        treats the sandbox as broken)."""
        frame_id = request.get("id")
        reply = self.handle(request)
        return encode_response(
            frame_id if valid_id(frame_id) else "0",
            reply.kind,
            reply.body,
            is_error=reply.is_error,
            media=reply.media,
        )

    def handle(self, request: dict[str, Any]) -> Reply:
        tool, tool_input = request.get("tool"), request.get("input")
        if not isinstance(tool_input, dict):
            return Reply.text("input must be an object", is_error=True)
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
                    return Reply(kind, result.data, media=result.media_type)
                text, is_error = result, False
        except filetools.ToolFailure as e:
            text, is_error = str(e), True
        except Exception as e:  # the agent must outlive any one bad call
            text, is_error = f"{tool}: internal error: {type(e).__name__}: {e}", True
        return Reply.text(text, is_error=is_error)

    def bash(self, tool_input: dict[str, Any], timeout: float) -> tuple[str, bool]:
        if tool_input.get("restart"):
            self.shell.stop(everything=True)
            self.shell.start()
            return "bash session restarted", False
        command = tool_input.get("command")
        if not isinstance(command, str) or not command.strip():
            return "bash: command is required", True
        return self.shell.run(command, timeout)

    def grep(self, request: dict[str, Any]) -> Reply:
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
        reply = None if data is None else _child_reply(data)
        if reply is None:
            return Reply.text(f"grep: timed out after {GREP_SECONDS}s", is_error=True)
        return reply


def _child_reply(data: bytes) -> Reply | None:
    """The reply in `data` if it is exactly one well-formed text frame (a child killed
    mid-write is not)."""
    header, _, body = data.partition(b"\n")
    try:
        _, kind, _, is_error, length = parse_response_header(header)
    except ValueError:
        return None
    return Reply(kind, body, is_error) if kind == "text" and length == len(body) else None


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

    _make_undumpable()  # other processes of the sandbox must not write into its answer
    resource.setrlimit(resource.RLIMIT_CPU, (GREP_SECONDS, GREP_SECONDS + 1))
    request = FrameReader(0).read_request() or {}
    view = filetools.View(request["workdir"])
    try:
        text, is_error = filetools.run(view, "grep", request["input"]), False
    except filetools.ToolFailure as e:
        text, is_error = str(e), True
    reply = Reply.text(str(text), is_error=is_error)
    write_all(1, encode_response("0", "text", reply.body, is_error=is_error))


def _make_undumpable() -> None:
    """PR_SET_DUMPABLE 0: processes of the same uid then cannot open `/proc/<pid>/fd/*`, read
    `/proc/<pid>/mem` or attach to this process (ptrace access needs CAP_SYS_PTRACE).

    Raises:
        OSError: the kernel refused; the agent must not run exposed.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_DUMPABLE): {os.strerror(err)}")


def _detach_stdio() -> None:
    """Point stdin and stdout at /dev/null: they lead to the host, and children inherit them."""
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def main() -> None:
    """Entry point of the agent (pid 2 of the sandbox, under bwrap's init)."""
    import resource

    _make_undumpable()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    config = FrameReader(0).read_request()
    if config is None:
        return
    channel = int(config["channel_fd"])
    os.set_inheritable(channel, False)  # no command may inherit the channel
    _detach_stdio()
    disk = int(config["limits"].get("disk_bytes") or 0)
    if disk > 0:  # the write tool gets EFBIG (Python ignores SIGXFSZ); children inherit it
        resource.setrlimit(resource.RLIMIT_FSIZE, (disk, disk))
    agent = Agent(config)
    proxy = config.get("proxy")
    if proxy:
        from . import forward  # socket + threading cost ~2 ms: only when networking is limited

        forward.start(int(proxy["port"]), str(proxy["socket"]))
    write_all(channel, encode_response(str(config["id"]), "ready", str(os.getpid()).encode()))
    devnull = os.open("/dev/null", os.O_WRONLY)
    os.dup2(devnull, 2)  # stderr showed start-up errors to the host; nothing more goes there
    os.close(devnull)
    reader = FrameReader(channel)
    while (request := reader.read_request()) is not None:
        write_all(channel, agent.answer(request))
