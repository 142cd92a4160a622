"""The persistent bash behind the `bash` tool: framing, limits, timeouts, output caps. Stdlib only.

Commands are `read` and `eval`ed at top level (state persists, bad quoting cannot desync us);
the exit status comes back on a private fd, out of the command's reach.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Mapping

_PRELUDE = (
    b"IFS= read -r -d '' __corral_cmd; { eval \"$__corral_cmd\"\n"
    b"} </dev/null 3>&-; printf '%d\\n' $? >&3\n"
)
_SIGXCPU_STATUS = 128 + int(signal.SIGXCPU)
_SIGXFSZ_STATUS = 128 + int(signal.SIGXFSZ)
_SIGKILL_STATUS = 128 + int(signal.SIGKILL)
_MEMORY_HINTS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_FILE_SIZE_HINTS = ("File too large", "File size limit exceeded")
_GRACE_SECONDS = 0.5
_NPROC_HEADROOM = 16
"""RLIMIT_NPROC counts every task of the sandbox's uid, the namespace's init and this agent
(with its threads) included; the host's INFRA_TASKS leaves the same room in pids.max."""


def user_pids() -> set[int]:
    """Every process of this PID namespace except its init (1) and the caller."""
    me = os.getpid()
    return {int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)}


def descendants(root: int) -> set[int]:
    """Every live descendant of `root` (scans /proc; for shells outside a PID namespace)."""
    if root <= 1:  # pid 0/1 would mean "the whole machine"
        return set()
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    """Running, i.e. not gone and not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def kill_until_gone(select_pids: Callable[[], set[int]], rounds: int = 200) -> None:
    """SIGKILL `select_pids()` until none is alive; a fork bomb refills between sweeps."""
    for _ in range(rounds):
        pids = {pid for pid in select_pids() if _alive(pid)}
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.002)


class OutputBuffer:
    """Keeps the first and last `cap / 2` bytes of a stream and counts what it dropped."""

    def __init__(self, cap: int) -> None:
        self._half = max(cap // 2, 1)
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        self._tail += data
        if len(self._tail) > 2 * self._half:
            cut = len(self._tail) - self._half
            self.dropped += cut
            del self._tail[:cut]

    def text(self) -> str:
        if len(self._tail) > self._half:
            self.dropped += len(self._tail) - self._half
            del self._tail[: len(self._tail) - self._half]
        out = self._head.decode(errors="replace")
        if self.dropped:
            out += f"\n[output truncated: {self.dropped} bytes omitted]\n"
        return (out + self._tail.decode(errors="replace")).rstrip("\n")


class Shell:
    """One persistent `/bin/bash`; restarted on demand, on exit, or after a hard timeout.

    `sandboxed=True` means this process is alone in its PID namespace with its shell, so any
    process it sees is fair game for timeout and fork-bomb cleanup. Otherwise (tests on a
    plain host) only the shell's own descendants are ever signalled.
    """

    def __init__(
        self, env: Mapping[str, str], limits: Mapping[str, int], workdir: str, *, sandboxed: bool
    ) -> None:
        self._env = dict(env)
        self._limits = dict(limits)
        self._workdir = workdir
        self._sandboxed = sandboxed
        self.pid = 0
        self._cmd_w = self._out_r = self._st_r = -1

    def start(self) -> None:
        """Spawn bash and apply the per-command resource limits to it (inherited by children)."""
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()
        self._st_r, st_w = os.pipe()
        dup2 = os.POSIX_SPAWN_DUP2
        actions = [(dup2, cmd_r, 0), (dup2, out_w, 1), (dup2, out_w, 2), (dup2, st_w, 3)]
        self.pid = os.posix_spawn(
            "/bin/bash",
            ["bash", "--noprofile", "--norc"],
            self._env,
            file_actions=actions,
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM),
        )
        for fd in (cmd_r, out_w, st_w):
            os.close(fd)
        os.set_blocking(self._out_r, False)
        self._apply_limits()
        if os.path.realpath(self._workdir) != os.getcwd():
            quoted = "'" + self._workdir.replace("'", "'\\''") + "'"
            self._send(f"builtin cd -- {quoted}\n".encode())

    def scope(self) -> set[int]:
        """The processes cleanup may kill (never this process or the namespace's init)."""
        return user_pids() if self._sandboxed else descendants(self.pid)

    def _apply_limits(self) -> None:
        import resource

        lim = self._limits
        nproc = lim["max_processes"] + _NPROC_HEADROOM
        if not lim.get("rlimit_as"):
            # A pids cgroup enforces the limit and tells the host forks failed there (so the
            # tool result can say so): keep the rlimit a backstop above it, not a rival.
            nproc += 2 * _NPROC_HEADROOM
        pairs = [
            (resource.RLIMIT_CPU, lim["cpu_seconds"], lim["cpu_seconds"] + 1),
            (resource.RLIMIT_DATA, lim["memory_bytes"], lim["memory_bytes"]),
            (resource.RLIMIT_NPROC, nproc, nproc),
            (resource.RLIMIT_CORE, 0, 0),
        ]
        if lim.get("rlimit_as"):
            pairs.append((resource.RLIMIT_AS, lim["memory_bytes"], lim["memory_bytes"]))
        if lim.get("disk_bytes"):  # no single file, sparse or not, may exceed the disk quota
            pairs.append((resource.RLIMIT_FSIZE, lim["disk_bytes"], lim["disk_bytes"]))
        for res, soft, hard in pairs:
            resource.prlimit(self.pid, res, (soft, hard))
        try:
            with open(f"/proc/{self.pid}/oom_score_adj", "w") as f:
                f.write("500")  # the OOM killer should take a command, not the agent
        except OSError:
            pass

    def stop(self, *, everything: bool = False) -> None:
        """Kill bash (and, if `everything`, every process in scope) and forget it."""
        if everything and self.pid:
            kill_until_gone(lambda: self.scope() - {self.pid})
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
        for fd in (self._cmd_w, self._out_r, self._st_r):
            if fd >= 0:
                os.close(fd)
        self.pid = 0
        self._cmd_w = self._out_r = self._st_r = -1

    def reap(self) -> str:
        """Kill every process in scope except the shell itself."""
        kill_until_gone(lambda: self.scope() - {self.pid})
        return "reaped"

    def restart(self) -> None:
        self.stop()
        self.start()

    def run(self, command: str, timeout: float) -> tuple[str, bool]:
        """Run `command`; returns `(text, is_error)`. Never raises for command failures."""
        if "\0" in command:
            return "bash: command contains a NUL byte", True
        if not self.pid:
            self.start()
        notes: list[str] = []
        self._check_process_limit(notes, set())
        before = self.scope()
        out = OutputBuffer(self._limits["output_bytes"])
        try:
            os.write(self._cmd_w, _PRELUDE)
            self._send(command.encode() + b"\0")
        except OSError:
            self.stop()
            return "bash: the shell exited; it will be restarted on the next call", True
        status = self._collect(out, time.monotonic() + timeout)
        if status is None:
            status = self._on_timeout(out, before, notes, timeout)
        elif status == "exited":
            notes.append(f"the shell exited (code {self._reap()}); a new shell will be started")
        if isinstance(status, int):
            self._explain(status, out, notes)
        self._check_process_limit(notes, before)
        if self.pid:
            self._drain(out)  # what the killed processes had already written
        return self._render(out, status, notes)

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._cmd_w, view) :]

    def _collect(self, out: OutputBuffer, deadline: float) -> int | str | None:
        """Read output until the exit status arrives: an int, "exited", or None on timeout."""
        poller = select.poll()
        poller.register(self._out_r, select.POLLIN)
        poller.register(self._st_r, select.POLLIN)
        status = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            for fd, _ in poller.poll(remaining * 1000):
                if fd == self._out_r:
                    self._drain(out)
                    continue
                chunk = os.read(self._st_r, 64)
                if not chunk:
                    self._drain(out)
                    return "exited"
                status += chunk
                if status.endswith(b"\n"):
                    self._drain(out)
                    return int(status)

    def _drain(self, out: OutputBuffer) -> None:
        while True:
            try:
                chunk = os.read(self._out_r, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                return
            out.add(chunk)

    def _on_timeout(
        self, out: OutputBuffer, before: set[int], notes: list[str], timeout: float
    ) -> int | str:
        """Kill what the command started; if bash itself is stuck (a builtin loop), restart it."""
        kill_until_gone(lambda: self.scope() - before - {self.pid})
        status = self._collect(out, time.monotonic() + _GRACE_SECONDS)
        notes.append(f"bash: command timed out after {timeout:g}s and was killed")
        if isinstance(status, int):
            return -1
        self.restart()
        notes.append("the shell was restarted: cwd and environment variables were reset")
        return "restarted"

    def _reap(self) -> int:
        code = 0
        try:
            _, raw = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(raw)
        except OSError:
            pass
        self.pid = 0
        self.stop()
        return code

    def _explain(self, status: int, out: OutputBuffer, notes: list[str]) -> None:
        lim = self._limits
        if status == _SIGXCPU_STATUS:
            notes.append(f"killed: CPU time limit of {lim['cpu_seconds']}s exceeded")
        elif status == _SIGKILL_STATUS:
            notes.append("killed by SIGKILL")
        text = out.text()
        if status != 0 and any(h in text for h in _MEMORY_HINTS):
            notes.append(f"commands here may use at most {lim['memory_bytes'] // 2**20} MiB")
        disk = lim.get("disk_bytes")
        if disk and (status == _SIGXFSZ_STATUS or any(h in text for h in _FILE_SIZE_HINTS)):
            killed = "killed: " if status == _SIGXFSZ_STATUS else ""
            notes.append(f"{killed}no file may exceed the disk quota of {disk / 2**20:.1f} MiB")

    def _check_process_limit(self, notes: list[str], before: set[int]) -> None:
        """At the limit, nothing more can run: kill every process but the shell (fork bombs).

        Processes a command leaves running are counted again after a moment, because a fork
        bomb's first command returns at once and fills the table in the background.
        """
        maximum = self._limits["max_processes"]
        if not self._sandboxed:
            return
        if before and user_pids() - before:
            time.sleep(0.05)
        if len(user_pids()) < maximum:
            return
        self.reap()
        notes.append(
            f"process limit of {maximum} reached: every process in the sandbox except the shell "
            "was killed"
        )

    @staticmethod
    def _render(out: OutputBuffer, status: int | str, notes: list[str]) -> tuple[str, bool]:
        text = out.text()
        is_error = status != 0 or bool(notes)
        if isinstance(status, int) and status > 0 and not any("killed" in n for n in notes):
            notes.append(f"exit code {status}")
        if notes:
            text += ("\n" if text else "") + "\n".join(f"[{n}]" for n in notes)
        return text or "(no output)", is_error
