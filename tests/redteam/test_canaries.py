"""The red-team suite: many sessions, each with its own canaries of every secret kind, whose
agents try to get them out; then every place a secret could end up is searched.

Each session gets a vault holding an `environment_variable` secret, an MCP credential
(`static_bearer`, or `mcp_oauth` with access and refresh tokens and a client secret) and a
`github_repository` resource with its own `authorization_token`. The scripted model makes one
MCP call and one bash command per session (an attack family chosen by the session's number,
see `attacks.py`), then sweeps the sandbox for any canary. Some sessions are set up to fail
(a refused bearer, a refused refresh, a refused git token: error messages are a classic leak,
and the fake MCP server quotes refused secrets back in its error bodies), some rotate their
secrets afterwards. Sessions run concurrently against one server.

Then: every canary, plain, base64 (alone and in a git Basic header) and hex, searched in every
API response body the client received, every event of every session, the fake model's
requests (bodies and headers), the whole data dir (server log, SQLite database and WAL,
workspaces, CA files), on PostgreSQL every row of every table cast to text, the hosts that are
not the secret's destination, and the sandbox's own view. A canary may appear only where it is
used: the HTTPS host receiving the substituted `environment_variable` secret (and only its own
session's), the MCP server receiving its bearer, the token endpoint receiving the refresh token
and client secret, the git server receiving the repository token, the model API receiving the
server's API key.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import anthropic
import httpx2
import psycopg
import pytest
from psycopg import sql

from tests.fakes.git_server import GitServer, make_repository
from tests.fakes.mcp_server import McpTestServer, OAuthClient
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn, by_marker
from tests.fakes.tls_host import TlsHost, start_tls_host
from tests.hands.conftest import needs_bwrap
from tests.redteam.attacks import PREFIX, SWEEP, Ports, attack
from tests.server import ServerProcess, backend_env

# One test runs every session: its budget is the whole suite's, not one test's.
pytestmark = [pytest.mark.bwrap, needs_bwrap, pytest.mark.timeout(1200)]

SESSIONS = {"sqlite": 200, "postgres": 60}
"""Sessions per backend: the full 200 on SQLite; PostgreSQL runs every family and failure mode
on fewer (same code paths above the store; the store is searched row by row)."""
PARALLEL = 24
TURN_SECONDS = 240
"""A session's turn that has not ended by then fails the suite (its events are reported)."""
TOOLSET = {"type": "agent_toolset_20260401"}
ALLOW = {"type": "always_allow"}

# Every form in which a canary could leak, as patterns that match any canary: a canary is
# PREFIX + [a-z0-9]; base64 of its first 6 bytes and of a git Basic header's first 21 are fixed.
_B64_ALONE = base64.b64encode(PREFIX[:6].encode())
_B64_BASIC = base64.b64encode(b"x-access-token:" + PREFIX[:6].encode())
_HEX = PREFIX.encode().hex().encode()
LEAK = re.compile(
    b"|".join(re.escape(p) for p in (PREFIX.encode(), _B64_ALONE, _B64_BASIC, _HEX)),
    re.IGNORECASE,
)


def canary(kind: str, i: int) -> str:
    return f"{PREFIX}{kind}{i:03d}x{secrets.token_hex(10)}"


def forms(secret: str) -> list[bytes]:
    """The exact forms of one canary: plain, base64, in a git Basic header, hex."""
    raw = secret.encode()
    return [
        raw,
        base64.b64encode(raw),
        base64.b64encode(b"x-access-token:" + raw),
        raw.hex().encode(),
    ]


def leaks(blob: bytes) -> list[str]:
    """Every canary-shaped string in `blob` (some context around each, for the report)."""
    return [
        blob[max(0, m.start() - 40) : m.end() + 40].decode("latin-1") for m in LEAK.finditer(blob)
    ]


@dataclass
class Plan:
    """One session's canaries and what it does."""

    i: int
    env_secret: str
    git_token: str
    mcp_kind: str  # static_bearer | mcp_oauth
    mcp_token: str  # the bearer, or the OAuth access token
    refresh_token: str = ""
    client_secret: str = ""
    fresh_token: str = ""  # issued by the token endpoint on refresh
    rotated: list[str] = field(default_factory=list)  # canaries set after the turn
    git_ok: bool = True
    mcp_ok: bool = True
    expired: bool = False  # an OAuth access token that must be refreshed first
    session_id: str = ""
    vault_id: str = ""
    mcp_credential: str = ""
    results: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    timing: list[float] = field(default_factory=list)
    streamed: list[bytes] = field(default_factory=list)

    @property
    def canaries(self) -> list[str]:
        found = [self.env_secret, self.git_token, self.mcp_token, *self.rotated]
        found += [c for c in (self.refresh_token, self.client_secret, self.fresh_token) if c]
        return found


def make_plans(n: int) -> list[Plan]:
    plans = []
    for i in range(n):
        oauth = i % 2 == 1
        plan = Plan(
            i=i,
            env_secret=canary("env", i),
            git_token=canary("git", i),
            mcp_kind="mcp_oauth" if oauth else "static_bearer",
            mcp_token=canary("acc" if oauth else "bear", i),
            git_ok=i % 7 != 5,
            mcp_ok=i % 10 != 8,
        )
        if oauth:
            plan.refresh_token = canary("ref", i)
            plan.client_secret = canary("cls", i)
            plan.expired = i % 10 in (3, 9)
            plan.fresh_token = canary("new", i) if i % 10 == 3 else ""
            plan.mcp_ok = i % 10 != 9  # 9: the token endpoint refuses the refresh token
        plans.append(plan)
    return plans


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A plain-HTTP host no credential names: records every request line and header."""

    seen: ClassVar[list[bytes]] = []

    def _any(self) -> None:
        _Recorder.seen.append(f"{self.requestline}\n{self.headers}".encode())
        self.send_response(200)
        self.send_header("Content-Length", "6")
        self.end_headers()
        self.wfile.write(b"other\n")

    do_GET = do_POST = do_PUT = _any

    def log_message(self, format: str, *args: object) -> None:
        pass


class _RecorderServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # TLS handshakes and resets from the CONNECT attacks are expected here


@dataclass
class Rig:
    """The server under attack and everything around it."""

    server: ServerProcess
    database_url: str | None
    fake: FakeModelServer
    mcp: McpTestServer
    git: GitServer
    tls: TlsHost
    model_key: str
    other_port: int
    responses: list[bytes]


@pytest.fixture(scope="module")
def rig(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[Rig]:
    _Recorder.seen.clear()
    other = _RecorderServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    tls = start_tls_host(tmp_path_factory.mktemp("tls"))
    mcp = McpTestServer().start()
    mcp.echo_secrets = True
    mcp.oauth = OAuthClient(refresh_token="not-a-canary", client_id="nobody")
    root = tmp_path_factory.mktemp("git")
    git = GitServer(root, set()).__enter__()
    make_repository(root / "team", "app.git")
    model_key = canary("model", 0)
    data = tmp_path_factory.mktemp("corral-redteam")
    # Idle sandboxes go soon: 200 of them need not all stay alive.
    (data / "corral.toml").write_text("[server]\nsandbox_idle_seconds = 3\n")
    private = [
        f"127.0.0.1:{tls.port}",
        f"localhost:{other.server_address[1]}",
        f"127.0.0.1:{other.server_address[1]}",
        f"127.0.0.1:{mcp.port}",
        f"127.0.0.1:{git.port}",
    ]
    try:
        with backend_env(backend) as env:
            env = {
                **env,
                "CORRAL_EGRESS_ALLOW_PRIVATE": ",".join(private),
                "SSL_CERT_FILE": str(tls.bundle),
                "ANTHROPIC_API_KEY": model_key,
            }
            server = ServerProcess(data, model_url=fake_model.url, env=env).start()
            try:
                yield Rig(
                    server,
                    env.get("CORRAL_DATABASE_URL"),
                    fake_model,
                    mcp,
                    git,
                    tls,
                    model_key,
                    other.server_address[1],
                    [],
                )
            finally:
                server.stop()
    finally:
        git.__exit__(None, None, None)
        mcp.stop()
        tls.stop()
        other.shutdown()
        other.server_close()


def recording_client(rig: Rig) -> anthropic.Anthropic:
    """The SDK, keeping every response body it receives."""

    def keep(response: httpx2.Response) -> None:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return  # read by the test as it goes (Plan.streamed)
        response.read()
        rig.responses.append(response.content)

    http_client = httpx2.Client(event_hooks={"response": [keep]}, timeout=60)
    return rig.server.client(http_client=http_client)


def _script(plan: Plan, ports: Ports, victim: str) -> list[Turn]:
    family = plan.i % 3
    if family == 0:
        call = ToolUse("mcp__calc__echo", {"text": f"rt-{plan.i} $API_TOKEN ${{API_TOKEN}}"})
    elif family == 1:  # bad arguments: the MCP server's validation error comes back
        call = ToolUse("mcp__calc__add", {"a": "not a number", "b": []})
    else:  # a tool the server does not have
        call = ToolUse("mcp__calc__env", {"name": "API_TOKEN"})
    command = f"{attack(plan.i, ports, victim)}\n{SWEEP}"
    return [Turn([call, ToolUse("bash", {"command": command})]), Turn([Text("done")])]


def _setup(client: anthropic.Anthropic, rig: Rig, plan: Plan, agent_id: str, env_id: str) -> None:
    """Plant the session's canaries: a vault, its credentials, a session with a repository."""
    rig.git.tokens.add(plan.git_token) if plan.git_ok else None
    if plan.mcp_ok and not plan.expired:
        rig.mcp.tokens.add(plan.mcp_token)
    if plan.fresh_token:
        rig.mcp.oauth_clients[plan.refresh_token] = OAuthClient(
            refresh_token=plan.refresh_token,
            client_id=f"rt-{plan.i}",
            client_secret=plan.client_secret,
            auth_method="client_secret_post" if plan.i % 4 == 1 else "client_secret_basic",
            next_tokens=[plan.fresh_token],
        )
    vault = client.beta.vaults.create(display_name=f"rt-{plan.i}")
    plan.vault_id = vault.id
    client.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_TOKEN",
            "secret_value": plan.env_secret,
            "networking": {"type": "limited", "allowed_hosts": ["127.0.0.1"]},
            "injection_location": {"header": True, "body": True},
        },
    )
    auth: dict[str, Any]
    if plan.mcp_kind == "static_bearer":
        auth = {"type": "static_bearer", "token": plan.mcp_token, "mcp_server_url": rig.mcp.url}
    else:
        when = datetime.now(UTC) + (timedelta(seconds=20) if plan.expired else timedelta(hours=2))
        method = "client_secret_post" if plan.i % 4 == 1 else "client_secret_basic"
        auth = {
            "type": "mcp_oauth",
            "mcp_server_url": rig.mcp.url,
            "access_token": plan.mcp_token,
            "expires_at": when.isoformat().replace("+00:00", "Z"),
            "refresh": {
                "client_id": f"rt-{plan.i}",
                "refresh_token": plan.refresh_token,
                "token_endpoint": rig.mcp.token_url,
                "token_endpoint_auth": {"type": method, "client_secret": plan.client_secret},
            },
        }
    credential = client.beta.vaults.credentials.create(vault.id, auth=auth)  # type: ignore[arg-type]
    plan.mcp_credential = credential.id
    resources: Any = [
        {
            "type": "github_repository",
            "url": rig.git.url("team/app.git"),
            "authorization_token": plan.git_token,
            "mount_path": "/workspace/app",
        }
    ]
    session = client.beta.sessions.create(
        agent=agent_id, environment_id=env_id, vault_ids=[vault.id], resources=resources
    )
    plan.session_id = session.id


def _run(client: anthropic.Anthropic, plan: Plan) -> None:
    """One turn; then what a user would do afterwards (validate, rotate)."""
    text = f"rt-{plan.i:03d} go"
    with client.beta.sessions.events.stream(plan.session_id) as stream:
        # The stream carries pings, so it never times out by itself: a watchdog ends it.
        watchdog = threading.Timer(TURN_SECONDS, stream.close)
        watchdog.start()
        client.beta.sessions.events.send(
            plan.session_id,
            events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}],
        )
        for event in stream:  # the stream's own bytes are kept with the responses
            plan.streamed.append(event.model_dump_json().encode())
            if event.type == "session.status_idle" and event.stop_reason.type == "end_turn":
                break
        watchdog.cancel()
    log = list(client.beta.sessions.events.list(plan.session_id, limit=1000))
    ended = [e for e in log if e.type == "session.status_idle"]
    assert ended and ended[-1].stop_reason.type == "end_turn", (plan.i, [e.type for e in log])
    plan.results = [
        "".join(c.text for c in e.content or [] if c.type == "text")
        for e in log
        if e.type in ("agent.tool_result", "agent.mcp_tool_result")
    ]
    plan.errors = [e.error.type for e in log if e.type == "session.error"]
    plan.messages = [e.error.message for e in log if e.type == "session.error"]
    if plan.mcp_kind == "mcp_oauth" and plan.i % 10 in (1, 9):  # 9: the refresh is refused
        client.beta.vaults.credentials.mcp_oauth_validate(
            plan.mcp_credential, vault_id=plan.vault_id
        )
    if plan.i % 9 == 4:  # rotate the repository token (the new one must not show either)
        new = canary("rot", plan.i)
        plan.rotated.append(new)
        resource = client.beta.sessions.resources.list(plan.session_id).data[0]
        assert resource.type == "github_repository"
        client.beta.sessions.resources.update(
            resource.id, session_id=plan.session_id, authorization_token=new
        )
    if plan.i % 11 == 6:  # rotate the environment secret
        new = canary("env2", plan.i)
        plan.rotated.append(new)
        for credential in client.beta.vaults.credentials.list(plan.vault_id).data:
            if credential.auth.type == "environment_variable":
                client.beta.vaults.credentials.update(
                    credential.id,
                    vault_id=plan.vault_id,
                    auth={"type": "environment_variable", "secret_value": new},
                )


def _database_rows(url: str) -> Iterator[bytes]:
    """Every row of every table of the server's database, cast to text (bytea shows as hex)."""
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND table_type = 'BASE TABLE'"
        ).fetchall()
        for schema, table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} AS t").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            for (row,) in conn.execute(query):
                yield f"{schema}.{table}: {row}".encode()


def _data_dir(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                yield str(path), path.read_bytes()
            except PermissionError:  # a sandbox's file the test user cannot read
                yield str(path), b""


def test_two_hundred_sessions_try_to_take_their_secrets(rig: Rig, backend: str) -> None:
    started = time.monotonic()
    n = int(os.environ.get("CORRAL_REDTEAM_SESSIONS") or SESSIONS[backend])
    plans = make_plans(n)
    client = recording_client(rig)
    tools: Any = [
        TOOLSET,
        {
            "type": "mcp_toolset",
            "mcp_server_name": "calc",
            "default_config": {"permission_policy": ALLOW},
        },
    ]
    agent = client.beta.agents.create(
        model="claude-sonnet-4-5",
        name="red team",
        mcp_servers=[{"type": "url", "name": "calc", "url": rig.mcp.url}],
        tools=tools,
    )
    environment = client.beta.environments.create(
        name="red team",
        config={
            "type": "cloud",
            "networking": {
                "type": "limited",
                "allowed_hosts": ["127.0.0.1", "localhost"],
                "allow_mcp_servers": True,
            },
        },
    )
    ports = Ports(
        tls=rig.tls.port,
        other=rig.other_port,
        mcp=rig.mcp.port,
        api=rig.server.port,
        model=int(rig.fake.url.rsplit(":", 1)[1]),
    )
    _setup(client, rig, plans[0], agent.id, environment.id)
    victim_resource = client.beta.sessions.resources.list(plans[0].session_id).data[0]
    assert victim_resource.type == "github_repository"
    victim = victim_resource.id
    rig.fake.reset(by_marker({f"rt-{p.i:03d}": _script(p, ports, victim) for p in plans}))

    def one(plan: Plan) -> None:
        begin = time.monotonic()
        if not plan.session_id:
            _setup(client, rig, plan, agent.id, environment.id)
        plan.timing.append(time.monotonic() - begin)
        _run(client, plan)
        plan.timing.append(time.monotonic() - begin)

    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(one, plans))
    ran = time.monotonic() - started
    assert rig.server.proc is not None
    stat = Path(f"/proc/{rig.server.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    print(
        f"\nCPU: server {(int(stat[11]) + int(stat[12])) / tick:.1f} s, its children "
        f"{(int(stat[13]) + int(stat[14])) / tick:.1f} s; test process {sum(os.times()[:2]):.1f} s,"
        f" its children {sum(os.times()[2:4]):.1f} s"
    )
    setup = sorted(p.timing[0] for p in plans)
    total = sorted(p.timing[1] for p in plans)
    print(
        f"\nper session: setup median {setup[n // 2]:.1f} s max {setup[-1]:.1f} s;"
        f" setup+turn median {total[n // 2]:.1f} s max {total[-1]:.1f} s"
    )
    # Every event of every session once more, in full, after the last rotation.
    for plan in plans:
        list(client.beta.sessions.events.list(plan.session_id, limit=1000))
        client.beta.sessions.retrieve(plan.session_id)
        client.beta.vaults.credentials.list(plan.vault_id)
    time.sleep(4)  # idle sandboxes reaped: what they leave behind is in the data dir too

    _assert_attacks_ran(plans, rig)
    _assert_uses_only_where_intended(plans, rig)
    _assert_nowhere_else(plans, rig)
    print(
        f"\nred team: {n} sessions on {backend}: ran in {ran:.1f} s, "
        f"searched in {time.monotonic() - started - ran:.1f} s"
    )


PLAIN = re.compile(PREFIX.encode() + rb"[a-z0-9]+")


def _plain(blob: bytes) -> set[str]:
    return {m.decode() for m in PLAIN.findall(blob)}


def _basic_password(header: str) -> str:
    if not header.startswith("Basic "):
        return header
    return base64.b64decode(header[6:]).decode(errors="replace").partition(":")[2]


def _assert_attacks_ran(plans: list[Plan], rig: Rig) -> None:
    """The attacks did what they set out to do (so the search below has something to find)."""
    for plan in plans:
        where = f"session {plan.i} ({plan.session_id})"
        assert len(plan.results) == 2, (where, plan.results, plan.errors)
        mcp_result, bash_result = plan.results
        assert bash_result.rstrip().endswith("swept"), (where, bash_result[-2000:])
        assert "HIT " not in bash_result, (where, bash_result[-2000:])
        family = plan.i % 10
        if family == 7:  # the proxy refused every way into the host, and the other session's repo
            codes = re.findall(r"code=(\d+)", bash_result)
            # API, model, MCP server (reachable as allowed, but no bearer), metadata, [::1],
            # another session's repository at the git forwarder
            assert codes[:5] == ["403", "403", "401", "403", "403"], (where, bash_result)
            assert codes[5] in ("403", "404"), (where, bash_result)
        if family == 3 and plan.git_ok:
            assert "pushed=0" in bash_result, (where, bash_result)
        if plan.i % 3 == 0 and plan.mcp_ok:
            assert f"rt-{plan.i} $API_TOKEN" in mcp_result, (where, mcp_result)
        kinds = set(plan.errors)
        assert plan.mcp_ok == ("mcp_authentication_failed_error" not in kinds), (
            where,
            plan.messages,
        )
        assert plan.git_ok == (not any(k.startswith("repository_") for k in kinds)), (
            where,
            plan.messages,
        )
    used = {m for seen in rig.tls.seen for m in _plain(f"{seen.headers}{seen.body!r}".encode())}
    for plan in plans:
        if plan.i % 10 in (4, 6, 9):
            assert plan.env_secret in used, f"session {plan.i}: the secret was not substituted"
    other = b"\n".join(_Recorder.seen)
    for plan in plans:  # the placeholder went out as it is to a host no credential names
        if plan.i % 10 == 4:
            assert f"GET /rt-{plan.i}/plain ".encode() in other, f"session {plan.i}"
    assert other.count(b"corral-placeholder-") >= len(plans) // 10
    refreshed = {r.get("refresh_token") for r in rig.mcp.token_requests}
    assert {p.refresh_token for p in plans if p.fresh_token} <= refreshed


def _assert_uses_only_where_intended(plans: list[Plan], rig: Rig) -> None:
    """Each recipient got only the canaries meant for it (and each session only its own)."""
    wrong: list[str] = []
    env_owner = {p.env_secret: p.i for p in plans}
    for seen in rig.tls.seen:
        found = _plain(f"{seen.path} {seen.headers} ".encode() + seen.body)
        for secret in found:
            owner = env_owner.get(secret)
            if owner is None or not seen.path.startswith(f"/rt-{owner}/"):
                wrong.append(f"HTTPS host {seen.path}: {secret}")
    mcp_tokens = {p.mcp_token for p in plans} | {p.fresh_token for p in plans if p.fresh_token}
    for auth in rig.mcp.seen_auth:
        wrong += [f"MCP server: {s}" for s in _plain(auth.encode()) - mcp_tokens]
    pairs = {(p.refresh_token, p.client_secret) for p in plans if p.refresh_token}
    refresh_tokens = {p.refresh_token for p in plans}
    for form in rig.mcp.token_requests:
        secret = form.get("client_secret") or _basic_password(form.get("_authorization", ""))
        token = form.get("refresh_token", "")
        if token in refresh_tokens and (token, secret) not in pairs:
            wrong.append(f"token endpoint: {token} with {secret}")
        rest = {
            k: v
            for k, v in form.items()
            if k not in ("refresh_token", "client_secret", "_authorization")
        }
        wrong += [f"token endpoint: {s}" for s in _plain(json.dumps(rest).encode())]
    git_tokens = {p.git_token for p in plans} | {r for p in plans for r in p.rotated}
    for auth in rig.git.seen_authorization:
        wrong += [f"git server: {s}" for s in _plain(_basic_password(auth).encode()) - git_tokens]
    for blob in _Recorder.seen:
        wrong += [f"other host: {hit}" for hit in leaks(blob)]
    for record in rig.fake.recorded:
        key = {"x-api-key": rig.model_key, "authorization": f"Bearer {rig.model_key}"}
        assert any(record.headers.get(k) == v for k, v in key.items()), record.headers.keys()
        headers = {k: v for k, v in record.headers.items() if key.get(k) != v}
        wrong += [f"model request headers: {hit}" for hit in leaks(json.dumps(headers).encode())]
    assert not wrong, wrong


def _assert_nowhere_else(plans: list[Plan], rig: Rig) -> None:
    """No canary, in any form, in any response, event, model request, log, file or row."""
    places: list[tuple[str, bytes]] = [
        (f"API response {n}", body) for n, body in enumerate(rig.responses)
    ]
    places += [
        (f"model request {n}", json.dumps(r).encode()) for n, r in enumerate(rig.fake.requests)
    ]
    places += list(_data_dir(rig.server.data_dir))
    if rig.database_url:
        rows = [("database", row) for row in _database_rows(rig.database_url)]
        assert len(rows) > 10 * len(plans)  # the search reached the sessions' data
        places += rows
    owner = {c: p.i for p in plans for c in p.canaries}
    hits = []
    for where, blob in places:
        for hit in leaks(blob):
            secret = next((c for c in owner if c in hit), "?")
            hits.append(f"{where}: session {owner.get(secret, '?')}: {hit!r}")
    assert not hits, "\n".join(hits[:50])
    assert len(rig.responses) > 5 * len(plans)


def test_the_search_sees_every_form_of_a_canary() -> None:
    """The patterns find a canary however it is encoded, and nothing else."""
    secret = canary("self", 7)
    for form in forms(secret):
        assert leaks(b"...{" + form + b"}..."), form
    assert leaks(b"x" + secret.upper().encode())  # case changed
    assert not leaks(b"corral-placeholder-0123456789abcdef RTC4 NARY " + secrets.token_bytes(64))
