"""The contract every `Hands` implementation must pass (inspect_ai `self_check` style).

`FUNCTIONAL`: tool semantics any backend owes the brain; `ISOLATION`: what a real sandbox must
also guarantee. Checks get a fresh provider from a factory and know no concrete backend.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.errors import HandsError
from corral.hands.base import Hands, Limits, Mount, Networking, Sandbox, SandboxRecipe, ToolOutput

HandsFactory = Callable[[Path], Hands]
"""Makes a provider whose private state lives under the given directory."""

PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


class ConformanceFailure(AssertionError):
    """A `Hands` implementation broke the contract."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Env:
    """What a check gets: a provider and a scratch directory it owns."""

    hands: Hands
    tmp: Path
    sandboxes: list[Sandbox] = field(default_factory=list)

    def recipe(
        self,
        name: str = "s1",
        *,
        mounts: tuple[Mount, ...] = (),
        networking: Networking | None = None,
        limits: Limits | None = None,
        env: dict[str, str] | None = None,
    ) -> SandboxRecipe:
        """A recipe whose workspace/outputs are `tmp/<name>/...`."""
        base = self.tmp / name
        return SandboxRecipe(
            session_id=name,
            workspace=base / "workspace",
            outputs=base / "outputs",
            mounts=mounts,
            networking=networking or Networking(),
            limits=limits or Limits(),
            env=env or {},
        )

    async def sandbox(self, name: str = "s1", **kwargs: Any) -> Sandbox:
        """Provision `recipe(name, **kwargs)`."""
        sandbox = await self.hands.provision(self.recipe(name, **kwargs))
        self.sandboxes.append(sandbox)
        return sandbox


Check = Callable[[Env], Awaitable[None]]


def expect(condition: object, message: str) -> None:
    """Raise `ConformanceFailure(message)` unless `condition` holds."""
    if not condition:
        raise ConformanceFailure(message)


def text_of(output: ToolOutput) -> str:
    return "\n".join(str(b.get("text", "")) for b in output.content if b.get("type") == "text")


async def run(sandbox: Sandbox, name: str, **tool_input: object) -> tuple[str, bool]:
    out = await sandbox.execute(name, dict(tool_input))
    return text_of(out), out.is_error


async def run_check(check: Check, factory: HandsFactory, tmp: Path) -> None:
    """Run one check against a fresh provider, closing it whatever happens."""
    env = Env(hands=factory(tmp / "hands-state"), tmp=tmp)
    try:
        await check(env)
    finally:
        await env.hands.aclose()


async def self_check(factory: HandsFactory, tmp: Path, *, isolation: bool) -> dict[str, str]:
    """Run every check; returns `{check name: failure}` (empty when the backend conforms)."""
    failures: dict[str, str] = {}
    for check in [*FUNCTIONAL, *(ISOLATION if isolation else ())]:
        try:
            await run_check(check, factory, tmp / check.__name__)
        except Exception as e:
            failures[check.__name__] = f"{type(e).__name__}: {e}"
    return failures


# --- functional ------------------------------------------------------------------------


async def bash_runs_and_persists_state(env: Env) -> None:
    sb = await env.sandbox()
    text, err = await run(sb, "bash", command="echo hello")
    expect(text == "hello" and not err, f"echo: {text!r} {err}")
    await run(sb, "bash", command="mkdir -p sub && cd sub && export CORRAL_X=42")
    text, _ = await run(sb, "bash", command='basename "$PWD"; echo "$CORRAL_X"')
    expect(text == "sub\n42", f"cwd/env must persist between calls, got {text!r}")


async def bash_errors(env: Env) -> None:
    sb = await env.sandbox()
    text, err = await run(sb, "bash", command="echo out; echo oops >&2; false")
    expect(err and "out" in text and "oops" in text, f"non-zero exit: {text!r} {err}")
    _, err = await run(sb, "bash")
    expect(err, "a missing command is an error")
    text, err = await run(sb, "bash", command="exit 3")
    expect(err, "exiting the shell is an error")
    text, err = await run(sb, "bash", command="echo back")
    expect(text == "back" and not err, f"a new shell after exit: {text!r}")


async def bash_restart(env: Env) -> None:
    sb = await env.sandbox()
    await run(sb, "bash", command="export CORRAL_Y=1")
    text, err = await run(sb, "bash", restart=True)
    expect(text == "bash session restarted" and not err, f"restart: {text!r}")
    text, _ = await run(sb, "bash", command='echo "[$CORRAL_Y]"')
    expect(text == "[]", f"restart must reset the environment, got {text!r}")


async def bash_timeout(env: Env) -> None:
    sb = await env.sandbox()
    text, err = await run(sb, "bash", command="echo before; sleep 60", timeout_ms=300)
    expect(err and "timed out" in text and "before" in text, f"timeout: {text!r}")
    text, err = await run(sb, "bash", command="echo after")
    expect(text == "after" and not err, f"the shell must work after a timeout: {text!r}")


async def bash_output_is_capped(env: Env) -> None:
    sb = await env.sandbox(limits=Limits(output_bytes=10_000))
    text, err = await run(sb, "bash", command="head -c 2000000 /dev/zero | tr '\\0' x; echo END")
    expect("truncated" in text and len(text) < 12_000, f"cap: {len(text)} chars")
    expect(text.endswith("END") and not err, "the tail of the output is kept")


async def file_tools(env: Env) -> None:
    sb = await env.sandbox()
    text, err = await run(sb, "write", file_path="dir/a.txt", content="one\ntwo\nthree\n")
    expect(text == "wrote 14 bytes to dir/a.txt" and not err, f"write: {text!r}")
    host = env.recipe().workspace / "dir" / "a.txt"
    expect(host.read_text() == "one\ntwo\nthree\n", "write lands in the workspace")
    text, _ = await run(sb, "read", file_path="/workspace/dir/a.txt")
    expect(text == "one\ntwo\nthree\n", f"read: {text!r}")
    text, _ = await run(sb, "read", file_path="dir/a.txt", view_range=[2, 3])
    expect(text == "two\nthree", f"view_range: {text!r}")
    text, err = await run(sb, "read", file_path="missing.txt")
    expect(err and "no such file" in text, f"missing file: {text!r}")
    text, err = await run(sb, "edit", file_path="dir/a.txt", old_string="two", new_string="2")
    expect(text == "edited dir/a.txt (1 replacement(s))" and not err, f"edit: {text!r}")
    text, err = await run(sb, "edit", file_path="dir/a.txt", old_string="zzz", new_string="")
    expect(err and "not found" in text, f"edit not found: {text!r}")
    await run(sb, "write", file_path="b.txt", content="x x x")
    text, err = await run(sb, "edit", file_path="b.txt", old_string="x", new_string="y")
    expect(err and "appears 3 times" in text, f"edit not unique: {text!r}")
    text, _ = await run(
        sb, "edit", file_path="b.txt", old_string="x", new_string="y", replace_all=True
    )
    expect(text == "edited b.txt (3 replacement(s))", f"replace_all: {text!r}")


async def read_binary_and_limits(env: Env) -> None:
    sb = await env.sandbox()
    workspace = env.recipe().workspace
    (workspace / "dot.png").write_bytes(PNG_1X1)
    out = await sb.execute("read", {"file_path": "dot.png"})
    block = out.content[0]
    expect(block["type"] == "image" and block["source"]["media_type"] == "image/png", f"{block}")
    (workspace / "big.txt").write_text("line\n" * 100_000)
    text, err = await run(sb, "read", file_path="big.txt")
    expect(err and "view_range" in text, f"whole-file cap: {text[:200]!r}")
    (workspace / "bin.dat").write_bytes(b"\xff\xfe\x00\x01")
    text, err = await run(sb, "read", file_path="bin.dat")
    expect(err and "UTF-8" in text, f"binary: {text!r}")


async def glob_and_grep(env: Env) -> None:
    sb = await env.sandbox()
    await run(sb, "write", file_path="src/old.py", content="def f():\n    return 1\n")
    workspace = env.recipe().workspace
    os.utime(workspace / "src/old.py", (1_000_000, 1_000_000))
    await run(sb, "write", file_path="src/pkg/new.py", content="X = 'needle'\n")
    text, _ = await run(sb, "glob", pattern="**/*.py")
    expect(text == "/workspace/src/pkg/new.py\n/workspace/src/old.py", f"glob: {text!r}")
    text, _ = await run(sb, "glob", pattern="*.rs")
    expect(text == "no matches", f"glob none: {text!r}")
    _, err = await run(sb, "glob", pattern="/etc/*")
    expect(err, "absolute glob patterns are refused")
    text, _ = await run(sb, "grep", pattern="need+le", path="src")
    expect(text == "/workspace/src/pkg/new.py:1:X = 'needle'", f"grep: {text!r}")
    text, _ = await run(sb, "grep", pattern="nothing-here")
    expect(text == "no matches", f"grep none: {text!r}")
    text, err = await run(sb, "grep", pattern="(")
    expect(err and "invalid regex" in text, f"bad regex: {text!r}")


async def directories_and_mounts(env: Env) -> None:
    ro, rw = env.tmp / "ro", env.tmp / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "data.txt").write_text("read me")
    mounts = (
        Mount(host_path=ro, sandbox_path="/mnt/ro", read_only=True),
        Mount(host_path=rw, sandbox_path="/mnt/rw", read_only=False),
    )
    sb = await env.sandbox(mounts=mounts)
    text, _ = await run(sb, "read", file_path="/mnt/ro/data.txt")
    expect(text == "read me", f"ro mount read: {text!r}")
    text, err = await run(sb, "write", file_path="/mnt/ro/x.txt", content="no")
    expect(err and "read-only" in text, f"write to a read-only mount: {text!r}")
    expect(not (ro / "x.txt").exists(), "nothing was written to the read-only mount")
    await run(sb, "write", file_path="/mnt/rw/y.txt", content="yes")
    expect((rw / "y.txt").read_text() == "yes", "rw mount write")
    await run(sb, "write", file_path="/mnt/session/outputs/report.md", content="# r")
    expect((env.recipe().outputs / "report.md").exists(), "outputs dir")


async def lifecycle(env: Env) -> None:
    sb = await env.sandbox()
    await run(sb, "write", file_path="keep.txt", content="kept")
    expect(sb.alive, "a new sandbox is alive")
    await sb.destroy()
    await sb.destroy()
    expect(not sb.alive, "destroyed sandboxes are not alive")
    try:
        await sb.execute("bash", {"command": "true"})
    except HandsError as e:
        expect(e.retryable, "calling a destroyed sandbox is retryable on a new one")
    else:
        raise ConformanceFailure("execute after destroy must raise HandsError")
    sb2 = await env.sandbox()
    text, _ = await run(sb2, "read", file_path="keep.txt")
    expect(text == "kept", "the workspace outlives a sandbox")
    text, err = await run(sb2, "no_such_tool")
    expect(err, "unknown tools are tool errors")


async def environment(env: Env) -> None:
    secret_names = ("ANTHROPIC_API_KEY", "CORRAL_API_KEYS")
    saved = {k: os.environ.get(k) for k in secret_names}
    os.environ.update(dict.fromkeys(secret_names, "sk-conformance-secret"))
    try:
        sb = await env.sandbox(env={"CORRAL_RECIPE_VAR": "visible"})
        text, _ = await run(sb, "bash", command="env")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    expect("CORRAL_RECIPE_VAR=visible" in text, "recipe.env reaches commands")
    expect("sk-conformance-secret" not in text, "the server's environment must not leak")


FUNCTIONAL: Sequence[Check] = (
    bash_runs_and_persists_state,
    bash_errors,
    bash_restart,
    bash_timeout,
    bash_output_is_capped,
    file_tools,
    read_binary_and_limits,
    glob_and_grep,
    directories_and_mounts,
    lifecycle,
    environment,
)

# --- isolation -------------------------------------------------------------------------


async def confined_process(env: Env) -> None:
    sb = await env.sandbox()
    status = "grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status"
    text, _ = await run(sb, "bash", command=f"id -u; {status}")
    expect("CapEff:\t0000000000000000" in text, f"capabilities must be dropped: {text!r}")
    expect("NoNewPrivs:\t1" in text and "Seccomp:\t2" in text, f"no_new_privs/seccomp: {text!r}")
    expect(text.startswith("1000\n"), f"non-root uid: {text!r}")
    for command in ("unshare -U true", "unshare -n true"):
        _, err = await run(sb, "bash", command=command)
        expect(err, f"{command!r} must fail")


async def host_is_invisible(env: Env) -> None:
    other = await env.sandbox("other")
    await run(other, "write", file_path="secret.txt", content="other-session-secret")
    sb = await env.sandbox("mine")
    other_ws = env.recipe("other").workspace
    probes = [
        f"cat {other_ws}/secret.txt",
        f"ls {env.tmp}",
        "ls /root",
        "cat /etc/shadow",
        f"cat /proc/{os.getpid()}/environ",
    ]
    for command in probes:
        text, err = await run(sb, "bash", command=command)
        expect(err and "other-session-secret" not in text, f"{command!r} must fail: {text!r}")
    text, _ = await run(sb, "bash", command="cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
    expect("ANTHROPIC" not in text and "CORRAL_API" not in text, f"/proc environ: {text!r}")
    _, err = await run(sb, "bash", command="touch /usr/x || touch /etc/x || touch /x")
    expect(err, "the system must be read-only")


async def no_network(env: Env) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        sb = await env.sandbox(networking=Networking(type="none"))
        probe = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        _, err = await run(sb, "bash", command=f'python3 -c "{probe}"')
        expect(err, "networking 'none' must not reach the host")
    finally:
        listener.close()


async def fork_bomb_is_contained(env: Env) -> None:
    sb = await env.sandbox(limits=Limits(max_processes=64, wall_seconds=20))
    text, err = await run(sb, "bash", command=":(){ :|:& };:; sleep 2", timeout_ms=5_000)
    expect(err and "process limit" in text, f"fork bomb: {text[-300:]!r}")
    text, err = await run(sb, "bash", command="echo survived")
    expect(text.endswith("survived") and not err, f"the sandbox must recover: {text[-300:]!r}")


async def memory_is_limited(env: Env) -> None:
    sb = await env.sandbox(limits=Limits(memory_bytes=256 * 2**20))
    text, err = await run(sb, "bash", command="python3 -c \"a = ' ' * 10**10\"")
    expect(err and "MemoryError" in text, f"memory hog: {text!r}")


async def sudden_death(env: Env) -> None:
    sb = await env.sandbox()
    await run(sb, "write", file_path="survivor.txt", content="still here")
    try:
        await sb.execute("bash", {"command": "kill -9 -1; sleep 30"})
    except HandsError as e:
        expect(e.code == "sandbox_died" and e.retryable, f"death: {e.code} {e}")
    else:
        raise ConformanceFailure("kill -9 -1 must end the sandbox with HandsError")
    expect(not sb.alive, "a dead sandbox is not alive")
    sb2 = await env.sandbox()
    text, _ = await run(sb2, "read", file_path="survivor.txt")
    expect(text == "still here", "files survive the sandbox")


ISOLATION: Sequence[Check] = (
    confined_process,
    host_is_invisible,
    no_network,
    fork_bomb_is_contained,
    memory_is_limited,
    sudden_death,
)
