"""What a sandbox sees of the host (a generated /etc, /usr read-only, the agent, its recipe dirs).

Every mount source comes as an fd the server opened (see `_sources`), and every mount point
is made on the sandbox's fresh root tmpfs, never inside a tree the sandbox can write. It must
not bind anything else: no host /etc, /root, /sys, data dir or other workspaces.
"""

from __future__ import annotations

import os
import posixpath
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from corral.errors import HandsError
from corral.hands._agent.main import boot_code
from corral.hands._sources import Owner, open_source, private_dirs
from corral.hands.base import SandboxRecipe

UID = GID = 1000
WORKDIR = "/workspace"
OUTPUTS_DIR = "/mnt/session/outputs"
AGENT_MOUNT = "/.corral"
PROXY_SOCKET = "/run/corral/egress.sock"
PROXY_PORT = 3128
HOSTNAME = "sandbox"
CA_BUNDLE = "/run/corral/ca-bundle.crt"
"""The system roots plus the environment's CA, when credentials are substituted."""
CA_CERT = "/run/corral/corral-ca.crt"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TRUST_FILES = {
    "src:ca-bundle": "ca-bundle.crt", "src:ca-cert": "corral-ca.crt",
    "src:ca-system": "ca-bundle.crt",
}  # fmt: skip
"""Mount source key -> file in the sandbox's host run dir (one fd per mount)."""
TRUST_ENV = {
    "SSL_CERT_FILE": CA_BUNDLE, "REQUESTS_CA_BUNDLE": CA_BUNDLE, "CURL_CA_BUNDLE": CA_BUNDLE,
    "NODE_EXTRA_CA_CERTS": CA_CERT,
}  # fmt: skip
"""Where common TLS clients look for extra trust (node adds to its own roots)."""
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RESERVED = (
    "/usr", "/etc", "/proc", "/dev", "/tmp", "/run/corral", AGENT_MOUNT, WORKDIR, OUTPUTS_DIR,
)  # fmt: skip
"""No mount at, above or below these: the system, and the trees the sandbox can write."""
_PROC_READ_ONLY = ("sys", "sysrq-trigger")
"""Kernel knobs under /proc, read-only although the sandbox's uid could not write them anyway
(bwrap covers /proc/irq and /proc/bus itself, but skips these when it cannot write them)."""
_TOP_LEVEL = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_COPIED = (
    "alternatives", "ssl/certs", "ssl/openssl.cnf", "ca-certificates.conf", "ld.so.cache",
    "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "protocols", "services", "mime.types",
    "magic", "magic.mime", "os-release", "debian_version", "shells", "inputrc", "gai.conf",
    "host.conf", "networks", "locale.alias", "terminfo", "python3", "python3.11", "perl",
)  # fmt: skip
_ETC_GENERATED = {
    "passwd": (
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        f"user:x:{UID}:{GID}:sandbox user:{WORKDIR}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    ),
    "group": f"root:x:0:\nuser:x:{GID}:\nnogroup:x:65534:\n",
    "hostname": f"{HOSTNAME}\n",
    "hosts": f"127.0.0.1 localhost {HOSTNAME}\n::1 localhost ip6-localhost ip6-loopback\n",
    "nsswitch.conf": (
        "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
        "protocols: files\nservices: files\n"
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class HostLayout:
    """What `prepare` made once per `LocalHands`: paths and the fixed part of every argv."""

    bwrap: str
    python: str
    state_dir: Path
    etc_dir: Path
    agent_dir: Path
    launcher: Path
    fds: tuple[int, ...]
    """O_PATH fds of etc_dir and agent_dir, used by `system_args`; closed by `close`."""
    system_args: tuple[str, ...]


def prepare(root_dir: Path, bwrap: str, python: str) -> HostLayout:
    """Check the host, then build /etc and the compiled agent under a fresh `root_dir/host-*`.

    Raises:
        HandsError: `bwrap_missing` or `python_missing` (not retryable).
    """
    found = shutil.which(bwrap)
    if found is None:
        raise HandsError(
            "bwrap_missing",
            f"bubblewrap ({bwrap!r}) was not found; install the Debian package `bubblewrap`",
            retryable=False,
        )
    if not os.access(python, os.X_OK):
        raise HandsError(
            "python_missing",
            f"{python} is needed inside sandboxes; install the Debian package `python3-minimal`",
            retryable=False,
        )
    private_dirs(root_dir)
    os.chmod(root_dir, 0o700)  # sandboxes' uids must not walk in, even from an older layout
    state_dir = root_dir / f"host-{secrets.token_hex(4)}"
    state_dir.mkdir(mode=0o700)
    (state_dir / "run").mkdir(mode=0o700)
    etc_dir = _build_etc(state_dir / "etc")
    agent_dir = _install_agent(state_dir / "agent", python)
    launcher = state_dir / "launch.py"
    shutil.copyfile(Path(__file__).with_name("_launch.py"), launcher)
    fds = (open_source(etc_dir), open_source(agent_dir))
    return HostLayout(
        bwrap=found,
        python=python,
        state_dir=state_dir,
        etc_dir=etc_dir,
        agent_dir=agent_dir,
        launcher=launcher,
        fds=fds,
        system_args=tuple(_system_args(*fds)),
    )


def close(layout: HostLayout) -> None:
    """Close the layout's fds (the provider is closing)."""
    for fd in layout.fds:
        os.close(fd)


def _build_etc(etc: Path) -> Path:
    etc.mkdir()
    for name in _ETC_COPIED:
        src, dst = Path("/etc") / name, etc / name
        if not (src.exists() or src.is_symlink()):
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir() and not src.is_symlink():
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)
    for name, text in _ETC_GENERATED.items():
        (etc / name).write_text(text)
    try:
        shutil.copyfile("/etc/resolv.conf", etc / "resolv.conf")
    except OSError:
        (etc / "resolv.conf").write_text("")
    return etc


def _install_agent(dest: Path, python: str) -> Path:
    """Copy `_agent/` and precompile it with the sandbox's Python (saves ~5 ms per start)."""
    src = Path(__file__).with_name("_agent")
    shutil.copytree(src, dest / "_agent", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [python, "-I", "-m", "compileall", "-q", str(dest / "_agent")],
        check=True,
        env={},
        stdout=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl+C is the server's to handle (see `_spawn.spawn`)
    )
    return dest


def _system_args(etc_fd: int, agent_fd: int) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LEVEL:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    args += ["--ro-bind-fd", str(etc_fd), "/etc", "--ro-bind-fd", str(agent_fd), AGENT_MOUNT]
    return args


def check_sandbox_path(path: str) -> str:
    """A normalised absolute mount point that shadows neither the system nor, above all, lies
    in /workspace or the outputs dir (where the sandbox could swap a parent for a symlink).

    Raises:
        HandsError: `invalid_recipe`.
    """
    norm = posixpath.normpath(path)
    if (
        not path.startswith("/")
        or norm == "/"
        or any(norm == r or norm.startswith(r + "/") or r.startswith(norm + "/") for r in _RESERVED)
    ):
        raise HandsError("invalid_recipe", f"cannot mount at {path!r}", retryable=False)
    return norm


def sandbox_env(recipe: SandboxRecipe, *, proxy: bool) -> dict[str, str]:
    """The complete environment inside the sandbox (the server's is never inherited)."""
    env = {
        "PATH": BASE_PATH,
        "HOME": WORKDIR,
        "LANG": "C.UTF-8",
        "USER": "user",
        "LOGNAME": "user",
        "SHELL": "/bin/bash",
        "TERM": "dumb",
        "TMPDIR": "/tmp",
    }
    if proxy:
        url = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            env[name] = url
    for key, value in recipe.env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise HandsError("invalid_recipe", f"bad environment variable {key!r}", retryable=False)
        env[key] = value
    return env


def build_args(
    layout: HostLayout,
    recipe: SandboxRecipe,
    *,
    env: dict[str, str],
    fds: dict[str, int],
) -> list[str]:
    """bwrap's options, to pass through `--args FD` so /proc/1/cmdline shows no host paths.

    `fds` holds the seccomp/info/block fds and the mount sources from `_sources`
    (`src:workspace`, `src:outputs`, `src:mount<i>` per recipe mount, `src:proxy`).
    The command (see `command`) must follow on the real argv: bwrap does not take it from FD.
    """
    limits = recipe.limits
    # Never --share-net: the host's loopback holds the database and the API. Every sandbox
    # has an empty network namespace and leaves only through the egress proxy.
    args = ["--unshare-all", "--unshare-user", "--disable-userns"]
    args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--uid", str(UID), "--gid", str(GID), "--hostname", HOSTNAME, "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    args += layout.system_args
    args += ["--proc", "/proc"]
    for name in _PROC_READ_ONLY:
        args += ["--ro-bind-try", f"/proc/{name}", f"/proc/{name}"]
    args += ["--dev", "/dev"]
    # tmpfs pages count against the memory limit: keep both below it so a full /tmp is ENOSPC
    args += ["--size", str(limits.memory_bytes // 4), "--tmpfs", "/dev/shm"]
    args += ["--size", str(limits.memory_bytes // 2), "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--dir", "/var", "--symlink", "../tmp", "/var/tmp"]
    args += ["--bind-fd", str(fds["src:workspace"]), WORKDIR]
    args += ["--bind-fd", str(fds["src:outputs"]), OUTPUTS_DIR]
    for i, mount in enumerate(recipe.mounts):
        kind = "--ro-bind-fd" if mount.read_only else "--bind-fd"
        args += [kind, str(fds[f"src:mount{i}"]), check_sandbox_path(mount.sandbox_path)]
    if "src:proxy" in fds:
        args += ["--bind-fd", str(fds["src:proxy"]), PROXY_SOCKET]
    if "src:ca-bundle" in fds:
        args += ["--ro-bind-fd", str(fds["src:ca-bundle"]), CA_BUNDLE]
        args += ["--ro-bind-fd", str(fds["src:ca-cert"]), CA_CERT]
        if (layout.etc_dir / SYSTEM_BUNDLE.removeprefix("/etc/")).is_file():
            # the default bundle too, for clients that ignore the variables
            args += ["--ro-bind-fd", str(fds["src:ca-system"]), SYSTEM_BUNDLE]
    args += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", WORKDIR]
    args += ["--seccomp", str(fds["seccomp"]), "--info-fd", str(fds["info"])]
    if "block" in fds:
        args += ["--block-fd", str(fds["block"])]
    return args


def launch(layout: HostLayout, owner: Owner, fds: dict[str, int]) -> list[str]:
    """The argv up to bwrap: bwrap itself when the server already is `owner`, else (the server
    is root) the launcher that stages the mount sources and becomes `owner` first, so that no
    sandbox process is ever host root."""
    if owner == (os.geteuid(), os.getegid()):
        return [layout.bwrap]
    staged = [*layout.fds, *(fd for key, fd in fds.items() if key.startswith("src:"))]
    uid, gid = owner
    return [
        layout.python, "-I", "-S", "-B", str(layout.launcher),
        str(uid), str(gid), ",".join(map(str, staged)), "--", layout.bwrap,
    ]  # fmt: skip


def command(layout: HostLayout) -> list[str]:
    """The agent's command line inside the sandbox."""
    return ["--", layout.python, "-I", "-S", "-B", "-c", boot_code(AGENT_MOUNT, "main")]
