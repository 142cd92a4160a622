"""`github_repository` resources end to end: SDK -> server -> host-side clone -> bubblewrap ->
egress proxy -> git forwarder -> a real `git http-backend` that requires the token.

The token is a canary: after the agent fetched and pushed, it must not be anywhere inside the
sandbox (environment, files including .git, /proc/*/cmdline and environ), in any event or
response, in the server's log or anywhere in its data dir (database included).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.git_server import GitServer, git, make_repository
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.hands.conftest import needs_bwrap
from tests.server import API_KEY, ServerProcess, backend_env

pytestmark = [pytest.mark.bwrap, needs_bwrap]
TOOLSET = {"type": "agent_toolset_20260401"}
TOKEN = "ghp_CANARY" + "7f3a9c1e5b" * 3
NEW_TOKEN = "ghp_ROTATED" + "0d4e8b2a6c" * 3
GIT_ID = "-c user.name=agent -c user.email=agent@example.com"


@pytest.fixture(scope="module")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    root = tmp_path_factory.mktemp("git")
    with GitServer(root, {TOKEN}) as server:
        server.shas = make_repository(root / "team", "app.git")  # type: ignore[attr-defined]
        yield server


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModelServer,
    backend: str,
    git_server: GitServer,
) -> Iterator[ServerProcess]:
    """The operator opens exactly the git server's loopback port to server-side fetches."""
    with backend_env(backend) as env:
        env = {**env, "CORRAL_EGRESS_ALLOW_PRIVATE": f"127.0.0.1:{git_server.port}"}
        proc = ServerProcess(
            tmp_path_factory.mktemp("corral"), model_url=fake_model.url, env=env
        ).start()
        yield proc
        proc.stop()


def bash(command: str) -> Turn:
    return Turn([ToolUse("bash", {"command": command})])


def results(client: anthropic.Anthropic, session_id: str) -> list[str]:
    return [
        e.content[0].text if e.content else ""
        for e in events(client, session_id)
        if e.type == "agent.tool_result"
    ]


def errors(client: anthropic.Anthropic, session_id: str) -> list[Any]:
    return [e.error for e in events(client, session_id) if e.type == "session.error"]


def turn(client: anthropic.Anthropic, session_id: str, fake: FakeModelServer, *steps: Turn) -> None:
    fake.reset([*steps, Turn([Text("done")])])
    n = len(events(client, session_id))
    say(client, session_id, "go")
    wait_idle(client, session_id, stop="end_turn", after=n, timeout=120)


def new_session(
    client: anthropic.Anthropic, resources: list[dict[str, Any]], networking: str = "limited"
) -> Any:
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="dev", tools=[TOOLSET])  # type: ignore[list-item]
    config: Any = {"type": "cloud", "networking": {"type": networking}}
    env = client.beta.environments.create(name="e", config=config)
    return client.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=resources,  # type: ignore[arg-type]
    )


def canaries(*tokens: str) -> list[bytes]:
    """A token as it could leak: plain, and inside a Basic header."""
    out = []
    for token in tokens:
        out.append(token.encode())
        out.append(base64.b64encode(f"x-access-token:{token}".encode()))
    return out


def assert_nowhere(data_dir: Path, found: list[bytes], *tokens: str) -> None:
    """No canary in the data dir's files (database, logs, workspaces) or in `found`."""
    needles = canaries(*tokens)
    hits = []
    for path in data_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            blob = path.read_bytes()
            hits += [f"{path}: {n[:12]!r}" for n in needles if n in blob]
    for i, blob in enumerate(found):
        hits += [f"item {i}: {n[:12]!r}" for n in needles if n in blob]
    assert not hits, hits


def test_clone_fetch_push_rotate_and_no_token_inside(
    server: ServerProcess, fake_model: FakeModelServer, git_server: GitServer
) -> None:
    git_server.tokens = {TOKEN}
    git_server.seen_authorization.clear()  # the host serves every backend's run of this module
    client = server.client()
    shas: dict[str, str] = git_server.shas  # type: ignore[attr-defined]
    url = git_server.url("team/app.git")
    session = new_session(
        client,
        [
            {
                "type": "github_repository",
                "url": url,
                "authorization_token": TOKEN,
                "checkout": {"type": "branch", "name": "feature"},
            },
            {
                "type": "github_repository",
                "url": url,
                "authorization_token": TOKEN,
                "checkout": {"type": "commit", "sha": shas["first"]},
                "mount_path": "/workspace/pinned/app",
            },
            {  # the remote's default branch
                "type": "github_repository",
                "url": url,
                "authorization_token": TOKEN,
                "mount_path": "default",
            },
        ],
        networking="limited",  # no allowed host: the proxy serves git's name and nothing else
    )
    branch, pinned, default = session.resources
    assert default.mount_path == "/workspace/default"  # type: ignore[union-attr]
    assert branch.type == "github_repository" and pinned.type == "github_repository"
    assert branch.mount_path == "/workspace/app"
    assert branch.checkout is not None and branch.checkout.type == "branch"
    assert branch.checkout.name == "feature"
    assert pinned.checkout is not None and pinned.checkout.type == "commit"
    assert pinned.checkout.sha == shas["first"]
    responses = [session.model_dump_json().encode()]
    listed = client.beta.sessions.resources.list(session.id)
    responses.append(json.dumps(listed.model_dump(mode="json")).encode())

    turn(
        client,
        session.id,
        fake_model,
        bash("cd /workspace/app && git branch --show-current && cat feature.txt"),
        bash("git -C /workspace/pinned/app rev-parse HEAD"),
        bash(
            "git -C /workspace/default branch --show-current; curl -s -o /dev/null "
            "-w %{http_code} -x http://127.0.0.1:3128 http://example.com/"
        ),
        bash(
            f"cd /workspace/app && echo from-agent > agent.txt && git add agent.txt && "
            f"git {GIT_ID} commit -q -m 'agent commit' && git push -q origin feature 2>&1; "
            "git fetch -q origin 2>&1; git rev-parse origin/main"
        ),
        # The forwarder speaks only smart HTTP, only for this session's repositories, and
        # drops whatever Authorization the sandbox sends (the host sees only the real one).
        bash(
            " ".join(
                f"curl -s -o /dev/null -w '%{{http_code}} ' -x http://127.0.0.1:3128 {extra}"
                f" http://git.corral.invalid/{path};"
                for path, extra in (
                    (f"{branch.id}/HEAD", ""),
                    ("sesrsc_someone_else/info/refs?service=git-upload-pack", ""),
                    (f"{branch.id}/info/refs?service=git-upload-pack", "-u evil:evil"),
                    (f"{branch.id}/info/refs?service=git-upload-pack", "-X DELETE"),
                )
            )
        ),
    )
    out = results(client, session.id)
    assert out[0].split() == ["feature", "on", "the", "feature", "branch"]
    assert out[1].strip() == shas["first"]
    assert out[2].split() == ["main", "403"], out[2]  # and nothing else is reachable
    assert out[3].strip() == shas["main"], out[3]
    assert out[4].split() == ["403", "404", "200", "403"], out[4]
    bare = git_server.root / "team" / "app.git"
    assert git("--git-dir", str(bare), "log", "-1", "--format=%s", "feature") == "agent commit"
    # The sandbox never sent a token: the forwarder added the only Authorization seen.
    assert set(git_server.seen_authorization) == {
        "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    }
    assert not errors(client, session.id)

    # Rotation: the old token is revoked at the host; a push fails until the new one is set.
    git_server.tokens = {NEW_TOKEN}
    push = f"cd /workspace/app && echo $RANDOM >> agent.txt && git {GIT_ID} commit -qam again"
    turn(client, session.id, fake_model, bash(f"{push} && git push -q origin feature 2>&1"))
    assert git("--git-dir", str(bare), "log", "-1", "--format=%s", "feature") == "agent commit"
    updated = client.beta.sessions.resources.update(
        branch.id, session_id=session.id, authorization_token=NEW_TOKEN
    )
    responses.append(updated.model_dump_json().encode())
    assert updated.updated_at > branch.updated_at  # type: ignore[union-attr]
    # 2 MB of noise makes git send the push chunked (above http.postBuffer).
    big = (
        f"head -c 2000000 /dev/urandom > big.bin && git add big.bin && git {GIT_ID} commit -qm big"
    )
    turn(
        client,
        session.id,
        fake_model,
        bash(
            f"cd /workspace/app && {big} && git push -q origin feature 2>&1; git log -1 --format=%s"
        ),
    )
    assert results(client, session.id)[-1].strip() == "big"
    assert git("--git-dir", str(bare), "log", "-1", "--format=%s", "feature") == "big"
    size = git("--git-dir", str(bare), "cat-file", "-s", "feature:big.bin")
    assert size == "2000000"
    assert git_server.chunked_bodies >= 1, "the big push was not chunked: the test lost its point"

    # Everything the sandbox can see, gathered from inside, plus git's own view of its config.
    dump = "/mnt/session/outputs/inside.txt"
    turn(
        client,
        session.id,
        fake_model,
        bash(
            f"(env; git -C /workspace/app config --list --show-origin; "
            f"cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline; "
            f"find /workspace /tmp /etc -type f -exec cat {{}} + 2>/dev/null) > {dump} 2>&1; "
            f"wc -c < {dump}"
        ),
    )
    workspace = server.data_dir / "sessions" / session.id / "workspace"
    config = (workspace / "app/.git/config").read_text()
    owner = workspace.stat().st_uid  # the sandbox's uid: the clone is its files, like the rest
    assert {p.stat().st_uid for p in (workspace / "app").rglob("*")} == {owner}
    assert f"url = {url}" in config and "insteadOf" in config and "@" not in config
    assert "Authorization" not in config and "extraheader" not in config.lower()
    found = [json.dumps([e.model_dump(mode="json") for e in events(client, session.id)]).encode()]
    found += responses
    for item in client.beta.files.list(scope_id=session.id):
        found.append(client.beta.files.download(item.id).read())
    assert len(found[-1]) > 1000, "the dump from inside the sandbox is missing"
    server.stop()  # flush everything to the data dir, then look at every byte of it
    try:
        assert_nowhere(server.data_dir, found, TOKEN, NEW_TOKEN)
    finally:
        server.start()


def test_failures_are_session_errors_and_the_session_goes_on(
    server: ServerProcess, fake_model: FakeModelServer, git_server: GitServer
) -> None:
    git_server.tokens = {TOKEN}  # whatever an earlier test rotated to
    client = server.client()
    url = git_server.url("team/app.git")
    refused = f"https://127.0.0.1:{git_server.port + 1 if git_server.port < 65535 else 1}/x/y"
    session = new_session(
        client,
        [
            {"type": "github_repository", "url": url, "authorization_token": "wrong-token"},
            {
                "type": "github_repository",
                "url": url,
                "authorization_token": TOKEN,
                "checkout": {"type": "branch", "name": "no-such-branch"},
                "mount_path": "/workspace/b",
            },
            {
                "type": "github_repository",
                "url": url,
                "authorization_token": TOKEN,
                "checkout": {"type": "commit", "sha": "0" * 40},
                "mount_path": "/workspace/c",
            },
            {
                "type": "github_repository",
                "url": git_server.url("team/none.git"),
                "authorization_token": TOKEN,
                "mount_path": "/workspace/d",
            },
            {"type": "github_repository", "url": refused, "mount_path": "/workspace/e"},
        ],  # fmt: skip
        networking="unrestricted",
    )
    turn(client, session.id, fake_model, bash("ls /workspace | wc -l; echo still-here"))
    assert results(client, session.id) == ["0\nstill-here"]
    all_errors = errors(client, session.id)
    assert sorted(e.type for e in all_errors) == [
        "repository_authentication_error",
        "repository_checkout_error",
        "repository_checkout_error",
        "repository_clone_error",
        "repository_not_found_error",
    ]
    assert all(e.retry_status.type == "retrying" for e in all_errors)
    clone = next(e for e in all_errors if e.type == "repository_clone_error")
    assert clone.repository_url == refused and "refused to connect" in clone.message
    assert "wrong-token" not in json.dumps([e.model_dump() for e in all_errors])
    assert wait_idle(client, session.id, stop="end_turn").stop_reason.type == "end_turn"


def test_bad_resources_are_400s_naming_the_field(
    server: ServerProcess, git_server: GitServer
) -> None:
    client = server.client()
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="v", tools=[TOOLSET])  # type: ignore[list-item]
    env = client.beta.environments.create(name="e", config={"type": "cloud"})
    good = {"type": "github_repository", "url": git_server.url("team/app.git")}
    cases = [
        ({**good, "url": "http://127.0.0.1:1/team/app.git"}, "resources[0].url"),
        ({**good, "url": "https://user:pw@github.com/o/r"}, "resources[0].url"),
        ({**good, "url": "ssh://github.com/o/r"}, "resources[0].url"),
        ({**good, "url": "https://github.com/"}, "resources[0].url"),
        ({**good, "mount_path": "/etc/app"}, "resources[0].mount_path"),
        ({**good, "mount_path": "/workspace/../etc"}, "resources[0].mount_path"),
        ({**good, "checkout": {"type": "branch", "name": "-x"}}, "resources[0].checkout.name"),
        ({**good, "checkout": {"type": "commit", "sha": "abc"}}, "resources[0].checkout.sha"),
        ({**good, "checkout": {"type": "tag", "name": "v1"}}, "resources[0].checkout.type"),
        ({**good, "authorization_token": "a b"}, "resources[0].authorization_token"),
    ]
    for resource, field in cases:
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.beta.sessions.create(
                agent=agent.id,
                environment_id=env.id,
                resources=[resource],  # type: ignore[list-item]
            )
        assert field in caught.value.message, (resource, caught.value.message)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.beta.sessions.create(
            agent=agent.id,
            environment_id=env.id,
            resources=[good, good],  # type: ignore[list-item]
        )
    assert "resources[1].mount_path" in caught.value.message
    session = client.beta.sessions.create(
        agent=agent.id,
        environment_id=env.id,
        resources=[good],  # type: ignore[list-item]
    )
    files_only = httpx.post(
        f"{server.url}/v1/sessions/{session.id}/resources/{session.resources[0].id}",  # type: ignore[union-attr]
        headers={"x-api-key": API_KEY},
        json={},
    )
    assert files_only.status_code == 400 and "authorization_token" in files_only.text
