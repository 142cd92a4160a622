"""Host-side clones (`hands.repositories`) against a real `git http-backend` on loopback: where
the tree lands and whose it is, what is never followed or overwritten, the disk quota, the
address rules, and that `.git/config` holds no secret."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from corral.hands.base import Limits, Repository, SandboxRecipe
from corral.hands.repositories import RepositoryCheckouts, RepositoryFailure
from corral.netpolicy import AddressPolicy
from tests.fakes.git_server import GitServer, make_repository

TOKEN = "ghp_clone_canary_91ab"
OWNER = (4242, 4242) if os.geteuid() == 0 else (os.geteuid(), os.getegid())


@pytest.fixture(scope="module")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    root = tmp_path_factory.mktemp("git")
    make_repository(root / "team", "app.git")
    with GitServer(root, {TOKEN}) as server:
        yield server


def recipe(tmp_path: Path, *repos: Repository, disk_bytes: int = 4 * 1024**3) -> SandboxRecipe:
    session = tmp_path / "session"
    (session / "workspace").mkdir(parents=True, exist_ok=True)
    return SandboxRecipe(
        session_id="sesn_test",
        workspace=session / "workspace",
        outputs=session / "outputs",
        repositories=repos,
        limits=Limits(disk_bytes=disk_bytes),
    )


def clone(
    git_server: GitServer, plan: SandboxRecipe, *, allow: bool = True
) -> list[RepositoryFailure]:
    async def token(resource_id: str) -> str | None:
        return TOKEN

    rules = [f"127.0.0.1:{git_server.port}"] if allow else []
    checkouts = RepositoryCheckouts(token, AddressPolicy.from_entries(rules))
    return anyio.run(checkouts.prepare, plan, OWNER)


def repo(git_server: GitServer, mount_path: str, resource_id: str = "sesrsc_1") -> Repository:
    return Repository(
        resource_id=resource_id, url=git_server.url("team/app.git"), mount_path=mount_path
    )


def test_lands_as_the_sandbox_uid_once_without_secrets(
    tmp_path: Path, git_server: GitServer
) -> None:
    plan = recipe(tmp_path, repo(git_server, "/workspace/deep/er/app"))
    assert clone(git_server, plan) == []
    app = plan.workspace / "deep" / "er" / "app"
    assert (app / "README").read_text() == "second\n"  # the default branch, main
    assert {(p.lstat().st_uid, p.lstat().st_gid) for p in app.rglob("*")} == {OWNER}
    assert (plan.workspace / "deep").stat().st_uid == OWNER[0]
    config = (app / ".git" / "config").read_text()
    assert TOKEN not in config and "extraheader" not in config.lower()
    assert "git.corral.invalid/sesrsc_1" in config
    before = len(git_server.requests)
    assert clone(git_server, plan) == []  # cloned already: nothing fetched again
    assert len(git_server.requests) == before


def test_never_follows_a_planted_link_nor_overwrites(tmp_path: Path, git_server: GitServer) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plan = recipe(
        tmp_path,
        repo(git_server, "/workspace/link/app", "sesrsc_link"),
        repo(git_server, "/workspace/full", "sesrsc_full"),
    )
    (plan.workspace / "link").symlink_to(elsewhere)
    (plan.workspace / "full").mkdir()
    (plan.workspace / "full" / "mine.txt").write_text("the agent's own file\n")
    failures = clone(git_server, plan)
    assert [f.type for f in failures] == ["repository_clone_error"] * 2
    assert "link" in failures[0].message and "not an empty directory" in failures[1].message
    assert list(elsewhere.iterdir()) == []
    assert os.listdir(plan.workspace / "full") == ["mine.txt"]
    assert not list((plan.workspace.parent / "repos").glob("staging-*"))


def test_disk_quota_and_address_rules(tmp_path: Path, git_server: GitServer) -> None:
    small = recipe(tmp_path / "a", repo(git_server, "/workspace/app"), disk_bytes=4096)
    [failure] = clone(git_server, small)
    assert failure.type == "repository_clone_error" and "disk quota" in failure.message
    assert not (small.workspace / "app").exists()
    before = len(git_server.requests)
    plan = recipe(tmp_path / "b", repo(git_server, "/workspace/app"))
    [refused] = clone(git_server, plan, allow=False)
    assert refused.type == "repository_clone_error" and "refused" in refused.message
    assert len(git_server.requests) == before  # not even a probe left the host
    assert TOKEN not in refused.message
