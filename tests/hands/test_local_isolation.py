"""What a LocalHands sandbox can see and do: privileges, syscalls, files, /proc, environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.hands.base import Limits, Mount
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import make_recipe, needs_bwrap

pytestmark = [pytest.mark.bwrap, needs_bwrap, pytest.mark.anyio]


async def bash(sandbox: LocalSandbox, command: str) -> tuple[str, bool]:
    out = await sandbox.execute("bash", {"command": command})
    return out.content[0]["text"], out.is_error


async def test_process_credentials(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    status, _ = await bash(sandbox, "cat /proc/self/status")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["CapEff"] == fields["CapPrm"] == fields["CapBnd"] == "0000000000000000"
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"
    assert fields["Uid"].split() == ["1000"] * 4 and fields["Gid"].split() == ["1000"] * 4
    text, _ = await bash(sandbox, "id; hostname; echo $HOME; pwd")
    assert (
        text == "uid=1000(user) gid=1000(user) groups=1000(user)\nsandbox\n/workspace\n/workspace"
    )


SYSCALL_PROBE = """
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
nr, args = int(sys.argv[1]), [int(a, 0) for a in sys.argv[2:]]
ret = libc.syscall(nr, *args)
print(errno.errorcode.get(ctypes.get_errno(), "OK") if ret < 0 else "OK")
"""


@pytest.mark.parametrize(
    ("call", "args", "expected"),
    [
        ("ptrace", "16 1", "EPERM"),  # PTRACE_ATTACH to init
        ("unshare", "0x10000000", "EPERM"),  # CLONE_NEWUSER
        ("mount", "0 0 0 0 0", "EPERM"),
        ("keyctl", "0 0", "EPERM"),
        ("bpf", "0 0 0", "EPERM"),
        ("perf_event_open", "0 0 -1 -1 0", "EPERM"),
        ("userfaultfd", "0", "EPERM"),
        ("io_uring_setup", "1 0", "EPERM"),
        ("personality", "0x0040000", "EPERM"),  # ADDR_NO_RANDOMIZE
        ("personality", "0xffffffff", "OK"),  # query only
        ("clone3", "0 0", "ENOSYS"),  # so glibc falls back to clone(2), whose flags are checked
        ("getpid", "", "OK"),
    ],
)
async def test_seccomp_filter_applies(
    local_hands: LocalHands, tmp_path: Path, call: str, args: str, expected: str
) -> None:
    numbers = {"ptrace": 101, "unshare": 272, "mount": 165, "keyctl": 250, "bpf": 321,
               "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
               "personality": 135, "clone3": 435, "getpid": 39}  # fmt: skip
    if os.uname().machine != "x86_64":
        pytest.skip("syscall numbers in this test are x86_64's")
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    await sandbox.execute("write", {"file_path": "probe.py", "content": SYSCALL_PROBE})
    text, _ = await bash(sandbox, f"python3 probe.py {numbers[call]} {args}")
    assert text == expected


async def test_threads_and_forks_still_work(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    code = (
        "import threading, subprocess; t = threading.Thread(target=print, args=('thread',)); "
        "t.start(); t.join(); print(subprocess.run(['echo', 'child'], capture_output=True, "
        "text=True).stdout.strip())"
    )
    text, err = await bash(sandbox, f'python3 -c "{code}" && (echo sub) | cat')
    assert (text, err) == ("thread\nchild\nsub", False)


async def test_server_environment_is_invisible(
    local_hands: LocalHands, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    monkeypatch.setenv("CORRAL_API_KEYS", "corral-test-secret")
    sandbox = await local_hands.provision(make_recipe(tmp_path, env={"FROM_RECIPE": "yes"}))
    env_text, _ = await bash(sandbox, "env")
    procs, _ = await bash(sandbox, "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' <$f; done")
    init, _ = await bash(sandbox, "tr '\\0' '\\n' </proc/1/environ; tr '\\0' ' ' </proc/1/cmdline")
    for text in (env_text, procs, init):
        assert "secret" not in text and "ANTHROPIC" not in text and "CORRAL_API" not in text
    assert "FROM_RECIPE=yes" in env_text and "HOME=/workspace" in env_text
    assert str(tmp_path) not in init, "host paths must not show in init's command line"


async def test_only_sandbox_processes_are_visible(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    text, _ = await bash(sandbox, "ps -eo pid=,comm=")
    processes = [line.split() for line in text.splitlines()]
    assert processes[:3] == [["1", "bwrap"], ["2", "python3"], ["3", "bash"]]
    assert len(processes) <= 5
    text, err = await bash(sandbox, f"ls /proc/{os.getpid()}")
    assert err


async def test_filesystem_view(local_hands: LocalHands, tmp_path: Path) -> None:
    other = await local_hands.provision(make_recipe(tmp_path, "other"))
    await other.execute("write", {"file_path": "secret.txt", "content": "other-secret"})
    sandbox = await local_hands.provision(make_recipe(tmp_path, "mine"))
    text, _ = await bash(sandbox, "ls -A /")
    # /run holds only the egress proxy socket (every networking mode but "none" has one)
    expected = {".corral", "dev", "etc", "mnt", "proc", "run", "tmp", "usr", "var", "workspace"}
    assert set(text.split()) == expected | _top_level_links()
    for probe in (
        f"ls {tmp_path}",
        f"cat {tmp_path}/other/workspace/secret.txt",
        "ls /root",
        "ls /sys",
        "cat /etc/shadow",
        "ls /etc/ssl/private",
        "ls /home",
    ):
        text, err = await bash(sandbox, probe)
        assert err, f"{probe!r} should fail, got {text!r}"
    passwd, _ = await bash(sandbox, "cat /etc/passwd")
    assert "user:x:1000:1000" in passwd and "root:x:0:0" in passwd
    assert passwd.count("\n") == 2, "a generated passwd, not the host's"
    text, _ = await bash(sandbox, "ls /workspace; cat /etc/hostname")
    assert text == "sandbox"


def _top_level_links() -> set[str]:
    names = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
    return {name for name in names if os.path.lexists(f"/{name}")}


async def test_system_is_read_only(local_hands: LocalHands, tmp_path: Path) -> None:
    source = tmp_path / "reference"
    source.mkdir()
    mounts = (Mount(host_path=source, sandbox_path="/mnt/reference", read_only=True),)
    sandbox = await local_hands.provision(make_recipe(tmp_path, mounts=mounts))
    for path in ("/usr/bin/x", "/etc/x", "/x", "/.corral/x", "/mnt/reference/x", "/dev/x"):
        text, err = await bash(sandbox, f"touch {path}")
        assert err and "Read-only file system" in text, path
    out = await sandbox.execute("write", {"file_path": "/usr/x", "content": "x"})
    assert out.is_error
    text, err = await bash(sandbox, "touch /tmp/a /var/tmp/b /dev/shm/c /workspace/d && echo ok")
    assert (text, err) == ("ok", False)
    assert not list(source.iterdir())


async def test_sandboxes_do_not_share_tmp(local_hands: LocalHands, tmp_path: Path) -> None:
    first = await local_hands.provision(make_recipe(tmp_path, "a"))
    second = await local_hands.provision(make_recipe(tmp_path, "b"))
    await bash(first, "echo mine > /tmp/shared")
    text, err = await bash(second, "cat /tmp/shared")
    assert err and "No such file" in text


async def test_tmpfs_sizes_follow_the_memory_limit(local_hands: LocalHands, tmp_path: Path) -> None:
    """/tmp and /dev/shm are memory: sized below the limit, so filling them is a clean ENOSPC."""
    recipe = make_recipe(tmp_path, limits=Limits(memory_bytes=64 * 2**20))
    sandbox = await local_hands.provision(recipe)
    for path in ("/tmp/fill", "/dev/shm/fill"):
        text, err = await bash(sandbox, f"head -c 100M /dev/zero > {path}")
        assert err and "No space left on device" in text, path
    text, err = await bash(sandbox, "rm /tmp/fill; echo fine")
    assert (text, err) == ("fine", False)
