"""The sandbox is nobody on the host: its uid, what it owns, and where mount points may land.

Run as root (as CI does): the server is root, so every sandbox must run on the host as a
per-session uid from the configured range, never as root. The last tests run a server as an
ordinary user, which needs no switch, and check the pieces (uid allocation, settings, sealing
a layer) on their own.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

from corral.config import load_settings
from corral.errors import HandsError
from corral.hands._sources import seal_tree
from corral.hands._uids import UidAllocator, UidRange
from corral.hands.base import Mount
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import make_recipe, needs_bwrap

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the server switches uids only as root")


def sandbox_test(test: Any) -> Any:
    """Marks for a test that provisions real sandboxes from a root server."""
    for mark in (pytest.mark.bwrap, needs_bwrap, pytest.mark.anyio, as_root):
        test = mark(test)
    return test


async def bash(sandbox: LocalSandbox, command: str) -> tuple[str, bool]:
    out = await sandbox.execute("bash", {"command": command})
    return out.content[0]["text"], out.is_error


def host_ids(pid: int) -> set[int]:
    """Real, effective, saved and filesystem uids and gids of a host process."""
    status = Path(f"/proc/{pid}/status").read_text()
    lines = [x for x in status.splitlines() if x.startswith(("Uid:", "Gid:"))]
    return {int(n) for line in lines for n in line.split()[1:]}


def sandbox_pids(sandbox: LocalSandbox) -> list[int]:
    """Host pids of the sandbox's init and all its descendants."""
    pids, i = [sandbox.init_pid], 0
    while i < len(pids):
        children = Path(f"/proc/{pids[i]}/task/{pids[i]}/children").read_text().split()
        pids += [int(c) for c in children]
        i += 1
    return pids


def host_uid(sandbox: LocalSandbox) -> int:
    """The one uid (and gid) that every process of the sandbox has on the host."""
    ids = set().union(*(host_ids(pid) for pid in sandbox_pids(sandbox)))
    assert len(ids) == 1, ids
    return ids.pop()


def mount_options(mountinfo: str) -> dict[str, set[str]]:
    """Mount point -> per-mount options, from /proc/self/mountinfo text."""
    found = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        found[fields[4]] = set(fields[5].split(","))
    return found


@sandbox_test
async def test_sandbox_processes_are_an_unprivileged_uid_on_the_host(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    _, err = await bash(sandbox, "sleep 30 & true")
    assert not err
    pids = sandbox_pids(sandbox)
    assert len(pids) >= 4, "init, agent, shell and the background sleep"
    uid = host_uid(sandbox)
    assert uid not in (0, 65534)
    # bubblewrap itself, outside the namespaces, is that uid too: nothing is host root
    assert sandbox._proc.pid not in pids and host_ids(sandbox._proc.pid) == {uid}
    # The sandbox sees uid 1000; --disable-userns nests one more namespace, so its
    # uid_map names that namespace's root (0), which the host maps to `uid` above.
    status, _ = await bash(sandbox, "id -u; grep NoNewPrivs /proc/self/status")
    assert status.split() == ["1000", "NoNewPrivs:", "1"]


@sandbox_test
async def test_proc_sys_is_read_only(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    # Writes back the value already there, so a broken wall changes nothing on the host.
    text, err = await bash(
        sandbox,
        'p=$(cat /proc/sys/kernel/core_pattern) && printf "%s\\n" "$p" '
        "> /proc/sys/kernel/core_pattern && echo written",
    )
    assert err and "written" not in text, text
    mounts, _ = await bash(sandbox, "cat /proc/self/mountinfo")
    options = mount_options(mounts)
    assert "ro" in options["/proc/sys"]
    assert "/sys" not in options, "the host's /sys is never mounted"
    for path in ("/workspace", "/mnt/session/outputs"):
        assert {"rw", "nosuid", "nodev"} <= options[path], path


@sandbox_test
async def test_workspace_files_belong_to_the_session_uid(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    recipe = make_recipe(tmp_path)
    sandbox = await local_hands.provision(recipe)
    _, err = await bash(
        sandbox,
        "touch /workspace/f && cp /bin/bash /workspace/sh && chmod 4755 /workspace/sh "
        "&& echo x > /mnt/session/outputs/o",
    )
    assert not err
    uid = host_uid(sandbox)
    for path in (recipe.workspace / "f", recipe.workspace / "sh", recipe.outputs / "o"):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == (uid, uid), path
    assert os.lstat(recipe.workspace / "sh").st_mode & stat.S_ISUID, "setuid, but of nobody"
    for directory in (recipe.workspace, recipe.outputs):
        st = os.lstat(directory)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700), directory


@sandbox_test
async def test_the_session_uid_cannot_reach_the_hands_state(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    uid = host_uid(sandbox)
    state = tmp_path / "hands-state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for child in state.iterdir():
        if child.is_dir():
            assert stat.S_IMODE(child.stat().st_mode) == 0o700, child
    # A process of that uid on the host (an escaped sandbox) cannot even list it.
    probe = await anyio.run_process(
        ["ls", str(state)], user=uid, group=uid, extra_groups=[], check=False
    )
    assert probe.returncode != 0 and b"Permission denied" in probe.stderr


@sandbox_test
async def test_sessions_get_their_own_uid_and_keep_it(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    first = await local_hands.provision(make_recipe(tmp_path, "sesn_a"))
    second = await local_hands.provision(make_recipe(tmp_path, "sesn_b"))
    uid_a, uid_b = host_uid(first), host_uid(second)
    assert uid_a != uid_b and 0 not in (uid_a, uid_b)
    await first.destroy()
    again = await local_hands.provision(make_recipe(tmp_path, "sesn_a"))
    assert host_uid(again) == uid_a


@sandbox_test
@pytest.mark.parametrize(
    "sandbox_path",
    ["/workspace/skills/runbook", "/workspace/x", "/mnt/session/outputs/x", "/mnt/rw/x"],
)
async def test_mount_points_never_land_in_a_writable_tree(
    local_hands: LocalHands, tmp_path: Path, sandbox_path: str
) -> None:
    source, rw = tmp_path / "source", tmp_path / "rw"
    source.mkdir()
    rw.mkdir()
    mounts = (
        Mount(host_path=rw, sandbox_path="/mnt/rw", read_only=False),
        Mount(host_path=source, sandbox_path=sandbox_path),
    )
    with pytest.raises(HandsError) as caught:
        await local_hands.provision(make_recipe(tmp_path, mounts=mounts))
    assert caught.value.code == "invalid_recipe"


@sandbox_test
async def test_planted_symlinks_are_not_followed_at_reprovision(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    """A sandbox replaces every name it can write with links to a host directory, dies,
    and is provisioned again: nothing appears in that host directory."""
    target = tmp_path / "host-target"
    target.mkdir()
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("steps")
    upload = tmp_path / "upload.log"
    upload.write_text("log")
    mounts = (
        Mount(host_path=skill, sandbox_path="/mnt/skills/runbook"),
        Mount(host_path=upload, sandbox_path="/mnt/session/uploads/app.log"),
    )
    recipe = make_recipe(tmp_path, mounts=mounts)
    sandbox = await local_hands.provision(recipe)
    links = " ".join(
        f"ln -sfn {to} {name};"
        for name in ("/workspace/skills", "/workspace/mnt", "/mnt/session/outputs/uploads")
        for to in (f"/oldroot{target}", f"../../oldroot{target}", str(target))
    )
    await bash(sandbox, f"mkdir -p /workspace/mnt; {links} true")
    await sandbox.destroy()
    again = await local_hands.provision(recipe)
    text, err = await bash(again, "cat /mnt/skills/runbook/SKILL.md /mnt/session/uploads/app.log")
    assert (text, err) == ("stepslog", False)
    assert list(target.iterdir()) == []
    # the skeleton around the mount points is the sandbox's fresh root tmpfs, read-only
    for path in ("/mnt/x", "/mnt/skills/x", "/mnt/session/x", "/mnt/session/uploads/x"):
        text, err = await bash(again, f"mkdir {path}")
        assert err and "Read-only file system" in text, path


SERVER_UID = 1_879_199_999
"""An ordinary user for the server in the next test (outside the default sandbox range)."""

NON_ROOT_SERVER = """
import anyio, os, sys
from pathlib import Path
from corral.hands.base import SandboxRecipe
from corral.hands.local import LocalHands

async def main(tmp):
    hands = LocalHands(tmp / "state", use_cgroups=False)
    try:
        sandbox = await hands.provision(
            SandboxRecipe(session_id="s1", workspace=tmp / "ws", outputs=tmp / "out")
        )
        out = await sandbox.execute("bash", {"command": "touch /workspace/f && id -u"})
        bwrap_uid = Path(f"/proc/{sandbox._proc.pid}/status").read_text().split("Uid:")[1]
        print(out.content[0]["text"], os.stat(tmp / "ws" / "f").st_uid, bwrap_uid.split()[0])
    finally:
        await hands.aclose()

anyio.run(main, Path(sys.argv[1]))
"""


# What `corral.hands.local` imports, all pure Python, so the system Python can run them.
PURE_PYTHON_DEPENDENCIES = (
    "corral", "anyio", "sniffio", "idna", "typing_extensions", "httpx", "httpcore", "h11",
    "certifi",
)  # fmt: skip


def _copy_module(name: str, into: Path) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return  # an optional dependency this Python version does without
    source = Path(spec.origin)
    if source.name == "__init__.py":
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(source.parent, into / name, ignore=ignore, dirs_exist_ok=True)
    else:
        into.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, into / source.name)


@pytest.mark.bwrap
@needs_bwrap
@as_root  # to become the ordinary user the server then is
def test_a_server_run_by_an_ordinary_user_runs_sandboxes_as_that_user() -> None:
    # The checkout, its venv and pytest's tmp dirs may all sit where the user cannot go (a
    # clone under `mktemp -d` is 0700): copy the pure-Python packages the server needs
    # into the user's home and run them with the system Python.
    with tempfile.TemporaryDirectory(prefix="corral-user-server-", dir="/tmp") as home:
        lib = Path(home) / "lib"
        for name in PURE_PYTHON_DEPENDENCIES:
            _copy_module(name, lib)
        for entry in [Path(home), *Path(home).rglob("*")]:
            os.chown(entry, SERVER_UID, SERVER_UID)
        path = [str(lib)]
        done = subprocess.run(
            ["/usr/bin/python3", "-s", "-c", NON_ROOT_SERVER, home],
            user=SERVER_UID, group=SERVER_UID, extra_groups=[], cwd=home,
            env={"PYTHONPATH": ":".join(path)}, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    inside, file_owner, bwrap_uid = done.stdout.split()
    assert (inside, int(file_owner), int(bwrap_uid)) == ("1000", SERVER_UID, SERVER_UID)


def test_uids_are_unique_per_session_and_stable(tmp_path: Path) -> None:
    uids = UidRange(5000, 5003)
    one, other = UidAllocator(tmp_path, uids), UidAllocator(tmp_path, uids)  # two processes
    got = [one.allocate("sesn_a"), other.allocate("sesn_b"), one.allocate("sesn_c")]
    assert len(set(got)) == 3 and all(5000 <= u <= 5003 for u in got)
    assert other.allocate("sesn_a") == got[0] and one.lookup("sesn_b") == got[1]
    assert other.allocate("sesn_d") not in got
    with pytest.raises(HandsError) as caught:
        one.allocate("sesn_e")
    assert caught.value.code == "uids_exhausted"
    other.free("sesn_b")
    other.free("sesn_b")
    assert one.lookup("sesn_b") is None
    assert one.allocate("sesn_e") == got[1], "a freed uid is taken again"
    for bad in ("", "../x", "a/b", ".hidden"):
        with pytest.raises(HandsError):
            one.allocate(bad)


def test_a_uid_taken_before_a_crash_is_found_again(tmp_path: Path) -> None:
    allocator = UidAllocator(tmp_path, UidRange(7000, 7999))
    uid = allocator.allocate("sesn_a")
    (tmp_path / "by-session" / "sesn_a").unlink()  # crashed before the index was written
    assert allocator.allocate("sesn_a") == uid


def test_uid_range_setting(tmp_path: Path) -> None:
    default = load_settings(environ={}, config_file=tmp_path / "none.toml")
    assert default.sandbox_uid_range == (1_879_048_192, 1_879_113_727)
    from_env = {"CORRAL_SANDBOX_UID_RANGE": "200000-265535"}
    assert load_settings(environ=from_env).sandbox_uid_range == (200000, 265535)
    toml = tmp_path / "corral.toml"
    toml.write_text("[server]\nsandbox_uid_range = [300000, 300099]\n")
    assert load_settings(environ={}, config_file=toml).sandbox_uid_range == (300000, 300099)
    for bad in ("100", "5-1", "0-10", "60000-70000", "a-b", f"1-{2**32 - 1}"):
        with pytest.raises(ValueError, match="range"):
            load_settings(environ={"CORRAL_SANDBOX_UID_RANGE": bad})


@as_root
def test_a_sealed_layer_is_the_servers_and_read_only(tmp_path: Path) -> None:
    builder = 1_879_048_200
    layer, outside = tmp_path / "layer", tmp_path / "outside"
    (layer / "bin").mkdir(parents=True)
    outside.write_text("host file")
    (layer / "bin" / "tool").write_text("#!/bin/sh\n")
    (layer / "data").write_text("x")
    (layer / "link").symlink_to(outside)
    os.chmod(layer / "bin" / "tool", 0o4777)
    os.chmod(layer / "data", 0o666)
    os.chmod(layer / "bin", 0o777)
    for path in (layer, layer / "bin", layer / "bin" / "tool", layer / "data"):
        os.chown(path, builder, builder)
    os.lchown(layer / "link", builder, builder)
    os.chmod(outside, 0o600)
    seal_tree(layer)
    modes = {
        p.relative_to(tmp_path).as_posix(): (p.lstat().st_uid, stat.S_IMODE(p.lstat().st_mode))
        for p in (layer, layer / "bin", layer / "bin" / "tool", layer / "data")
    }
    assert modes == {
        "layer": (0, 0o755),
        "layer/bin": (0, 0o755),
        "layer/bin/tool": (0, 0o755),
        "layer/data": (0, 0o644),
    }
    assert (layer / "link").lstat().st_uid == 0
    assert stat.S_IMODE(outside.stat().st_mode) == 0o600, "links are not followed"
