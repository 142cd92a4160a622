"""`environment_variable` credentials end to end: SDK -> server -> bubblewrap -> egress proxy.

A local HTTPS host (certificate from a test CA the server trusts through `SSL_CERT_FILE`)
stands in for the API the credential is for. The sandbox holds a placeholder; curl and Python
inside it send that placeholder in headers and bodies; the host receives the secret. The
secret (a canary) appears nowhere else: not in the sandbox (env, files, /proc), an event, a
model request, the server's log or the data dir; a request to another host carries only the
placeholder."""

from __future__ import annotations

import base64
import http.server
import json
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anthropic
import pytest

from tests.api.helpers import events, say, wait_idle
from tests.fakes.messages_server import FakeModelServer, Text, ToolUse, Turn
from tests.fakes.tls_host import TlsHost, start_tls_host
from tests.server import ServerProcess, backend_env

pytestmark = pytest.mark.bwrap
TOOLSET = {"type": "agent_toolset_20260401"}
CANARY = "canary-" + secrets.token_hex(12)


@pytest.fixture(scope="module")
def tls_host(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[TlsHost]:
    """One host per backend: the tests count the requests it saw."""
    host = start_tls_host(tmp_path_factory.mktemp("tls"))
    yield host
    host.stop()


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A plain-HTTP host no credential names; records the headers it gets."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        _Recorder.seen.append(dict(self.headers.items()))
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def other_host(backend: str) -> Iterator[int]:
    _Recorder.seen.clear()  # per backend, as the tests count what it saw
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModelServer,
    backend: str,
    tls_host: TlsHost,
) -> Iterator[ServerProcess]:
    """The operator opens the loopback to environments that list it; the server trusts the
    test CA (system roots plus it) for its upstream connections."""
    with backend_env(backend) as env:
        env = {
            **env,
            "CORRAL_EGRESS_ALLOW_PRIVATE": "127.0.0.1,localhost",
            "SSL_CERT_FILE": str(tls_host.bundle),
        }
        proc = ServerProcess(
            tmp_path_factory.mktemp("corral"), model_url=fake_model.url, env=env
        ).start()
        yield proc
        proc.stop()


def _credential(client: anthropic.Anthropic, hosts: list[str]) -> tuple[str, str]:
    vault = client.beta.vaults.create(display_name="api keys")
    cred = client.beta.vaults.credentials.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_TOKEN",
            "secret_value": CANARY,
            "networking": {"type": "limited", "allowed_hosts": hosts},
            "injection_location": {"header": True, "body": True},
        },
    )
    return vault.id, cred.id


def _session(client: anthropic.Anthropic, vault_id: str, allowed: list[str]) -> str:
    agent = client.beta.agents.create(model="claude-sonnet-4-5", name="c", tools=[TOOLSET])  # type: ignore[list-item]
    config: Any = {"type": "cloud", "networking": {"type": "limited", "allowed_hosts": allowed}}
    env = client.beta.environments.create(name="creds", config=config)
    session = client.beta.sessions.create(
        agent=agent.id, environment_id=env.id, vault_ids=[vault_id]
    )
    return session.id


def _results(client: anthropic.Anthropic, session_id: str) -> list[str]:
    return [
        e.content[0].text if e.content else ""
        for e in events(client, session_id)
        if e.type == "agent.tool_result"
    ]


def _sweep() -> str:
    """A command looking for the canary everywhere the sandbox can read; the canary itself
    travels base64-encoded so the command (an event) does not hold it."""
    encoded = base64.b64encode(CANARY.encode()).decode()
    return (
        f"c=$(echo {encoded} | base64 -d); found=0; "
        'env | grep -qF "$c" && { echo "FOUND in env"; found=1; }; '
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        '  grep -qaF "$c" "$f" 2>/dev/null && { echo "FOUND in $f"; found=1; }; done; '
        'grep -rlaF "$c" /workspace /tmp /etc /run /mnt /dev/shm 2>/dev/null && found=1; '
        'echo "swept found=$found token=$API_TOKEN"'
    )


def test_the_host_gets_the_secret_and_the_sandbox_only_the_placeholder(
    server: ServerProcess, fake_model: FakeModelServer, tls_host: TlsHost, other_host: int
) -> None:
    client = server.client()
    vault_id, _ = _credential(client, ["127.0.0.1"])
    session_id = _session(client, vault_id, ["127.0.0.1", "localhost"])
    url = f"{tls_host.url}/hook"
    curl = (
        f'curl -sS -X POST {url} -H "Authorization: Bearer $API_TOKEN" '
        f'--data-binary "{{\\"token\\": \\"$API_TOKEN\\"}}"'
    )
    chunked = (
        f'printf "key=%s&n=1" "$API_TOKEN" > /tmp/body && curl -sS {url} '
        '-H "Transfer-Encoding: chunked" --data-binary @/tmp/body'
    )
    python = (
        'python3 -c "import os, urllib.request as u; '
        f"r = u.Request('{url}', data=('p=' + os.environ['API_TOKEN']).encode(), "
        "headers={'X-Api-Key': os.environ['API_TOKEN']}); print(u.urlopen(r).read().decode())\""
    )
    # clients that ignore the variables read the default bundle, which trusts the CA too
    default = (
        "env -u SSL_CERT_FILE -u CURL_CA_BUNDLE -u REQUESTS_CA_BUNDLE "
        f'curl -sS {url} -H "X-Api-Key: $API_TOKEN"'
    )
    other = f'curl -sS http://localhost:{other_host}/ -H "X-Api-Key: $API_TOKEN"'
    fake_model.reset(
        [
            Turn([ToolUse("bash", {"command": curl})]),
            Turn([ToolUse("bash", {"command": chunked})]),
            Turn([ToolUse("bash", {"command": python})]),
            Turn([ToolUse("bash", {"command": default})]),
            Turn([ToolUse("bash", {"command": other})]),
            Turn([ToolUse("bash", {"command": _sweep()})]),
            Turn([Text("done")]),
        ]
    )
    say(client, session_id, "call the API")
    wait_idle(client, session_id, stop="end_turn", timeout=120)
    results = _results(client, session_id)
    assert results[:5] == ["ok 1", "ok 2", "ok 3", "ok 4", "ok"], results

    posted, chunk, py, plain = tls_host.seen
    assert posted.headers["Authorization"] == f"Bearer {CANARY}"
    assert json.loads(posted.body) == {"token": CANARY}
    assert chunk.headers.get("Transfer-Encoding") == "chunked"
    assert chunk.body == f"key={CANARY}&n=1".encode()
    assert py.headers["X-Api-Key"] == CANARY and py.body == f"p={CANARY}".encode()
    assert plain.headers["X-Api-Key"] == CANARY

    (elsewhere,) = _Recorder.seen  # another host: only ever the placeholder
    placeholder = elsewhere["X-Api-Key"]
    assert placeholder.startswith("corral-placeholder-") and CANARY not in str(elsewhere)
    assert results[5] == f"swept found=0 token={placeholder}"

    responses = [
        client.beta.sessions.retrieve(session_id).model_dump_json(),
        client.beta.vaults.credentials.list(vault_id).model_dump_json(),
    ]
    assert not any(CANARY in r for r in responses)
    log = [e.model_dump_json() for e in events(client, session_id)]
    assert log and not any(CANARY in e for e in log)
    assert CANARY not in json.dumps(fake_model.requests)
    _assert_nowhere_on_disk(server.data_dir, CANARY)


def _assert_nowhere_on_disk(data_dir: Path, canary: str) -> None:
    """The whole data dir (database, server log, sandboxes' state, CA files) in plain text."""
    needle = canary.encode()
    hits = [
        p
        for p in data_dir.rglob("*")
        if p.is_file() and not p.is_symlink() and needle in p.read_bytes()
    ]
    assert hits == []


def test_a_credential_host_the_environment_blocks_is_a_session_error(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    vault_id, cred_id = _credential(client, ["api.blocked.test", "127.0.0.1"])
    session_id = _session(client, vault_id, ["127.0.0.1"])
    fake_model.reset([Turn([Text("working anyway")])])
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    log = events(client, session_id)
    errors = [e for e in log if e.type == "session.error"]
    assert [e.error.type for e in errors] == ["credential_host_unreachable_error"]
    error = errors[0].error
    assert error.credential_id == cred_id and error.vault_id == vault_id
    assert "api.blocked.test" in error.message and "127.0.0.1" not in error.message
    kinds = [e.type for e in log]
    assert kinds.index("session.status_running") < kinds.index("session.error")
    assert "agent.message" in kinds  # the turn goes on


def test_a_reachable_credential_raises_no_error(
    server: ServerProcess, fake_model: FakeModelServer
) -> None:
    client = server.client()
    vault_id, _ = _credential(client, ["127.0.0.1"])
    session_id = _session(client, vault_id, ["127.0.0.1"])
    fake_model.reset([Turn([Text("fine")])])
    say(client, session_id, "hi")
    wait_idle(client, session_id, stop="end_turn")
    assert not [e for e in events(client, session_id) if e.type == "session.error"]


def test_an_archived_credential_is_no_longer_substituted(
    server: ServerProcess, fake_model: FakeModelServer, tls_host: TlsHost
) -> None:
    client = server.client()
    vault_id, cred_id = _credential(client, ["127.0.0.1"])
    session_id = _session(client, vault_id, ["127.0.0.1"])
    # -k: the new sandbox no longer trusts a Corral CA and talks to the host itself
    call = f'curl -sSk {tls_host.url}/again -H "X-Key: k$API_TOKEN"'
    before = len(tls_host.seen)
    fake_model.reset([Turn([ToolUse("bash", {"command": call})]), Turn([Text("one")])])
    say(client, session_id, "first")
    wait_idle(client, session_id, stop="end_turn", timeout=120)
    assert tls_host.seen[before].headers["X-Key"] == f"k{CANARY}"

    client.beta.vaults.credentials.archive(cred_id, vault_id=vault_id)
    fake_model.reset([Turn([ToolUse("bash", {"command": call})]), Turn([Text("two")])])
    say(client, session_id, "second")
    wait_idle(client, session_id, stop="end_turn", after=len(events(client, session_id)))
    assert tls_host.seen[before + 1].headers["X-Key"] == "k"  # a new sandbox, no credential
