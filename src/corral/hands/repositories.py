"""Host-side clones of a session's repository resources, before its sandbox starts.

For each repository not cloned yet (a marker beside the workspace, out of the sandbox's
sight, says which are), before provisioning:

1. **Probe** `<url>/info/refs?service=git-upload-pack` with the token through
   `corral.outbound.guarded_client`: 401/403/404 become `repository_authentication_error`,
   `repository_forbidden_error`, `repository_not_found_error`, a refused or dead host
   `repository_clone_error`, and a branch missing from the advertised refs
   `repository_checkout_error` - exact types without parsing git's messages.
2. **Clone** with the `git` binary into a staging directory the sandbox cannot see. The
   destination is admitted once more (`corral.netpolicy.admit`) and git is pinned to the
   admitted addresses with `http.curloptResolve`, redirects off, only this URL's protocol
   allowed, no proxy, no system or global config. The token reaches git only as an
   `http.extraHeader` in `GIT_CONFIG_COUNT/KEY/VALUE` of that one process's environment:
   never an argument, never written to `.git/config` (git persists only `clone --config`).
3. **Configure** the clone for the sandbox: `origin` keeps the plain URL, and
   `url.http://git.corral.invalid/<id>.insteadOf` sends its fetches and pushes to the
   forwarder (`hands._gitproxy`) through the sandbox's egress proxy.
4. **Hand over**: the tree is given to the sandbox's uid (lchown, never following links) and
   renamed into place beneath the workspace's directory fd, each parent opened with
   O_NOFOLLOW, so a link the sandbox planted earlier is never followed.

A failure is returned (never raised) and the repository is tried again at the next
provision (a token rotation re-makes the sandbox, so a fixed token takes effect).
Must not import session, store or anything above hands.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import anyio
import httpx

from corral.hands import _usage
from corral.hands._gitproxy import GIT_HOST, TokenSource, basic_auth, local_url
from corral.hands._sources import Owner
from corral.hands.base import Repository, SandboxRecipe
from corral.netpolicy import AddressPolicy, admit
from corral.outbound import guarded_client

__all__ = ["RepositoryCheckouts", "RepositoryFailure"]

log = logging.getLogger("corral.hands.git")
REPOS_DIR = "repos"
"""Beside `workspace` in the session's directory: staging clones and done-markers."""
_PROXY = "http://127.0.0.1:3128"
"""The sandbox's egress relay (`hands._bwrap.PROXY_PORT`)."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class RepositoryFailure:
    """Why one repository is missing from the workspace, as a `session.error` says it."""

    type: str
    """`repository_{authentication,forbidden,not_found,checkout,clone}_error`."""
    message: str
    url: str


class _Failed(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class RepositoryCheckouts:
    """Clones a recipe's repositories into its workspace (see the module docs)."""

    def __init__(
        self,
        tokens: TokenSource,
        policy: AddressPolicy,
        *,
        git: str = "git",
        timeout: float = 600.0,
    ) -> None:
        self._tokens = tokens
        self._policy = policy
        self._git = git
        self._timeout = timeout

    async def prepare(self, recipe: SandboxRecipe, owner: Owner) -> list[RepositoryFailure]:
        """Clone every repository of `recipe` not cloned yet; the failures, in order."""
        failures = []
        for repo in recipe.repositories:
            state = recipe.workspace.parent / REPOS_DIR
            if await anyio.Path(state / f"{repo.resource_id}.cloned").exists():
                continue
            token = None
            try:
                token = await self._tokens(repo.resource_id)
                await self._clone(repo, recipe, state, owner, token)
            except _Failed as failure:
                message = _redact(str(failure), token)
                log.warning("repository %s not cloned: %s", repo.url, message)
                failures.append(RepositoryFailure(failure.kind, message, repo.url))
            except Exception as exc:  # never fail the tool call over a repository
                log.exception("cloning %s", repo.url)
                message = _redact(f"cloning failed: {exc!r}", token)
                failures.append(RepositoryFailure("repository_clone_error", message, repo.url))
        return failures

    async def _clone(
        self, repo: Repository, recipe: SandboxRecipe, state: Path, owner: Owner, token: str | None
    ) -> None:
        workspace = recipe.workspace
        await anyio.Path(state).mkdir(mode=0o700, exist_ok=True)
        refs = await self._probe(repo, token)
        branch = repo.checkout[1] if repo.checkout and repo.checkout[0] == "branch" else None
        if branch is not None and f"refs/heads/{branch}" not in refs:
            msg = f"branch {branch!r} does not exist in {repo.url}"
            raise _Failed("repository_checkout_error", msg)
        staging = state / f"staging-{repo.resource_id}"
        await anyio.to_thread.run_sync(_remove, staging)
        try:
            with tempfile.TemporaryDirectory(dir=state) as home:
                env = await self._git_env(repo.url, token, home)
                await self._run(_clone_args(repo, staging), env, "repository_clone_error")
                if repo.checkout and repo.checkout[0] == "commit":
                    await self._checkout_commit(staging, repo.checkout[1], env)
                for key, value in _sandbox_config(repo):
                    await self._run(["-C", str(staging), "config", key, value], env, "")
            await _check_quota(staging, recipe)
            await anyio.to_thread.run_sync(_install, staging, workspace, repo.mount_path, owner)
        finally:
            await anyio.to_thread.run_sync(_remove, staging)
        await anyio.Path(state / f"{repo.resource_id}.cloned").write_text(repo.url + "\n")
        log.info("cloned %s into %s", repo.url, repo.mount_path)

    async def _probe(self, repo: Repository, token: str | None) -> set[str]:
        """The refs the remote advertises; a failure typed by the HTTP answer."""
        headers = {"user-agent": "git/corral", "accept": "*/*"}
        if token is not None:
            headers["authorization"] = basic_auth(token)
        url = f"{repo.url}/info/refs?service=git-upload-pack"
        async with guarded_client(self._policy, follow_redirects=False, timeout=30.0) as client:
            try:
                response = await client.get(url, headers=headers)
            except httpx.HTTPError as exc:
                msg = f"cannot reach {repo.url}: {exc}"
                raise _Failed("repository_clone_error", msg) from None
        kinds = {
            401: ("repository_authentication_error", "rejected the credentials (or needs some)"),
            403: ("repository_forbidden_error", "refused access"),
            404: ("repository_not_found_error", "reported the repository as not found"),
        }
        if response.status_code in kinds:
            kind, what = kinds[response.status_code]
            raise _Failed(kind, f"{repo.url}: the host {what} (HTTP {response.status_code})")
        if response.status_code != 200:
            msg = f"{repo.url}: the host answered HTTP {response.status_code}"
            raise _Failed("repository_clone_error", msg)
        return _advertised_refs(response.content)

    async def _git_env(self, url: str, token: str | None, home: str) -> dict[str, str]:
        """The environment of host-side git: pinned to admitted addresses, token in a header."""
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
        decision = await admit(host, port, self._policy)
        if not decision.allowed:
            raise _Failed("repository_clone_error", f"{url}: refused: {decision.reason}")
        addresses = ",".join(f"[{a}]" if ":" in a else a for a in decision.addresses)
        config = [
            ("http.curloptResolve", f"{host}:{port}:{addresses}"),
            ("http.followRedirects", "false"),
            ("http.proxy", ""),
            ("credential.helper", ""),
            ("core.askPass", ""),
            ("protocol.allow", "never"),
            (f"protocol.{parts.scheme}.allow", "always"),
        ]
        if token is not None:
            config.append(("http.extraHeader", f"Authorization: {basic_auth(token)}"))
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "LANG": "C.UTF-8",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ALLOW_PROTOCOL": parts.scheme,
            "GIT_CONFIG_COUNT": str(len(config)),
        }
        for i, (key, value) in enumerate(config):
            env[f"GIT_CONFIG_KEY_{i}"] = key
            env[f"GIT_CONFIG_VALUE_{i}"] = value
        return env

    async def _checkout_commit(self, staging: Path, sha: str, env: dict[str, str]) -> None:
        """Detach at `sha`; fetch it by id first when no ref reaches it."""
        kind = "repository_checkout_error"
        check = ["-C", str(staging), "cat-file", "-e", f"{sha}^{{commit}}"]
        try:
            await self._run(check, env, kind)
        except _Failed:
            try:
                await self._run(["-C", str(staging), "fetch", "--quiet", "origin", sha], env, kind)
            except _Failed:
                raise _Failed(kind, f"commit {sha} does not exist in the repository") from None
        await self._run(["-C", str(staging), "checkout", "--quiet", "--detach", sha], env, kind)

    async def _run(self, args: Sequence[str], env: dict[str, str], kind: str) -> None:
        """Run git; a non-zero exit is `_Failed(kind)` with git's last words."""
        with anyio.fail_after(self._timeout):
            result = await anyio.run_process(
                [self._git, *args],
                env=env,
                check=False,
                stdin=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,  # Ctrl+C is the server's to handle (graceful stop)
            )
        if result.returncode != 0:
            tail = result.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise _Failed(kind or "repository_clone_error", "git: " + " / ".join(tail))


async def _check_quota(staging: Path, recipe: SandboxRecipe) -> None:
    """The clone must fit in the workspace's disk quota with what is already there."""
    roots = (staging, recipe.workspace, recipe.outputs)
    usage = await anyio.to_thread.run_sync(_usage.measure, roots)
    if _usage.over_quota(usage, recipe.limits.disk_bytes) is not None:
        quota = recipe.limits.disk_bytes
        msg = f"the clone does not fit in the workspace's disk quota of {quota} bytes"
        raise _Failed("repository_clone_error", msg)


def _clone_args(repo: Repository, staging: Path) -> list[str]:
    args = ["clone", "--quiet", "--no-recurse-submodules"]
    if repo.checkout and repo.checkout[0] == "branch":
        args += ["--branch", repo.checkout[1]]
    return [*args, "--", repo.url, str(staging)]


def _sandbox_config(repo: Repository) -> list[tuple[str, str]]:
    """What the clone's `.git/config` gets for use inside the sandbox: no secret."""
    local = local_url(repo.resource_id)
    return [
        (f"url.{local}.insteadOf", repo.url),
        (f"http.http://{GIT_HOST}/.proxy", _PROXY),
    ]


def _advertised_refs(body: bytes) -> set[str]:
    """Ref names in a smart-HTTP (v0) advertisement: pkt-lines `<sha> <ref>[\\0caps]`."""
    refs, pos = set(), 0
    while pos + 4 <= len(body):
        try:
            size = int(body[pos : pos + 4], 16)
        except ValueError:
            break
        line = body[pos + 4 : pos + size] if size > 4 else b""
        pos += max(size, 4)
        fields = line.split(b"\0", 1)[0].strip().split(b" ", 1)
        if len(fields) == 2 and len(fields[0]) in (40, 64):
            refs.add(fields[1].decode(errors="replace"))
    return refs


def _redact(text: str, token: str | None) -> str:
    if token:
        text = text.replace(token, "***").replace(basic_auth(token).split(" ", 1)[1], "***")
    return text


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _install(staging: Path, workspace: Path, mount_path: str, owner: Owner) -> None:
    """Give the clone to `owner` and rename it to `mount_path` beneath the workspace."""
    if (os.geteuid(), os.getegid()) != owner:
        _chown_tree(staging, owner)
    parts = [p for p in mount_path.removeprefix("/workspace/").split("/") if p]
    parent = os.open(workspace, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
                os.chown(name, *owner, dir_fd=parent, follow_symlinks=False)
            child = _open_dir(name, parent, mount_path)
            os.close(parent)
            parent = child
        try:
            os.rename(staging, parts[-1], dst_dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                msg = f"{mount_path} already exists in the workspace and is not an empty directory"
                raise _Failed("repository_clone_error", msg) from None
            raise
    finally:
        os.close(parent)


def _open_dir(name: str, parent: int, mount_path: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError:
        msg = f"{mount_path}: a parent in the workspace is not a directory (or is a link)"
        raise _Failed("repository_clone_error", msg) from None


def _chown_tree(path: Path, owner: Owner) -> None:
    fd = os.open(path, _DIR_FLAGS)
    try:
        for _, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            for name in (*dirs, *files):
                os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
        os.fchown(fd, *owner)
    finally:
        os.close(fd)
