"""Credential substitution in the egress proxy: the request rewriter on split buffers, and the
proxy terminating TLS for a credential host (no sandbox; a real HTTPS host on loopback)."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest

from corral.hands._egress import EgressProxy, HostPolicy
from corral.hands._intercept import (
    BODY_LIMIT,
    Interceptor,
    Rules,
    host_matches,
    relay_requests,
    substitute,
)
from corral.hands.base import Hidden, Injection, Interception
from corral.netpolicy import EgressSettings
from corral.vault.ca import load_or_create_ca
from corral.vault.crypto import Keyring, new_key
from tests.fakes.tls_host import TlsHost, start_tls_host

pytestmark = pytest.mark.anyio

PH = b"corral-placeholder-0123456789abcdef0123456789abcdef"
SECRET = b"s3cr3t-canary-value"
RULES = Rules(header=((PH, SECRET),), body=((PH, SECRET),))
HOST, PORT = "api.test", 443


class _Sink:
    """The upstream side of the rewriter: collects what it writes."""

    def __init__(self) -> None:
        self.data = b""
        self.eof = False

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True


async def _rewrite(pieces: list[bytes], rules: Rules = RULES) -> bytes:
    """Feed `pieces` to a reader one by one (yielding between them) and rewrite."""
    reader = asyncio.StreamReader(limit=64 * 1024)
    sink = _Sink()

    async def feed() -> None:
        for piece in pieces:
            reader.feed_data(piece)
            await asyncio.sleep(0)
        reader.feed_eof()

    feeder = asyncio.ensure_future(feed())
    await relay_requests(
        reader, cast(asyncio.StreamWriter, sink), rules, HOST, PORT, lambda n: True
    )
    await feeder
    return sink.data


def _splits(raw: bytes) -> Iterator[list[bytes]]:
    for i in range(1, len(raw)):
        yield [raw[:i], raw[i:]]
    yield [raw[i : i + 1] for i in range(len(raw))]


def test_substitute_is_one_pass() -> None:
    other = b"corral-placeholder-ffffffffffffffffffffffffffffffff"
    pairs = [(PH, other), (other, b"X")]
    assert substitute(b"a" + PH + b"b" + other, pairs) == b"a" + other + b"bX"
    assert substitute(b"nothing here", pairs) == b"nothing here"


@pytest.mark.parametrize(
    ("rule", "host", "matches"),
    [
        ("api.test", "API.test.", True),
        ("*.test", "api.test", True),
        ("*.test", "test", False),
        ("*.test", "evil-test", False),
        ("api.test", "api.test.evil", False),
    ],
)
def test_host_matching(rule: str, host: str, matches: bool) -> None:
    assert host_matches(rule, host) is matches


async def test_content_length_body_and_header_split_anywhere() -> None:
    body = b'{"key": "' + PH + b'", "again": "' + PH + b'"}'
    raw = (
        b"POST /v1 HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + PH + b"\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    want_body = body.replace(PH, SECRET)
    for pieces in _splits(raw):
        out = await _rewrite(pieces)
        head, _, sent = out.partition(b"\r\n\r\n")
        assert sent == want_body
        assert b"Authorization: Bearer " + SECRET in head
        assert b"Content-Length: %d" % len(want_body) in head and PH not in out


async def test_chunked_body_with_the_placeholder_across_chunks() -> None:
    half = len(PH) // 2
    chunks = [b"x=" + PH[:half], PH[half:] + b"&y=1"]
    raw = b"PUT /p HTTP/1.1\r\nHost: api.test:443\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw += b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\nX-T: 1\r\n\r\n"
    for pieces in _splits(raw):
        out = await _rewrite(pieces)
        head, _, body = out.partition(b"\r\n\r\n")
        want = b"x=" + SECRET + b"&y=1"
        assert body == b"%x\r\n%s\r\n0\r\nX-T: 1\r\n\r\n" % (len(want), want)
        assert b"Transfer-Encoding: chunked" in head


async def test_keep_alive_requests_are_each_rewritten() -> None:
    one = b"GET /a HTTP/1.1\r\nHost: api.test\r\nX-Key: " + PH + b"\r\n\r\n"
    two = b"POST /b HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n" % len(PH) + PH
    out = await _rewrite([one + two])
    assert out.count(SECRET) == 2 and PH not in out


async def test_only_the_configured_locations_are_substituted() -> None:
    raw = b"POST / HTTP/1.1\r\nHost: api.test\r\nX: " + PH + b"\r\nContent-Length: %d\r\n\r\n"
    out = await _rewrite([raw % len(PH) + PH], Rules(header=((PH, SECRET),)))
    head, _, body = out.partition(b"\r\n\r\n")
    assert SECRET in head and body == PH


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nHost: other.test\r\nX: %s\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: api.test:444\r\nX: %s\r\n\r\n",
        b"GET http://other.test/ HTTP/1.1\r\nHost: api.test\r\nX: %s\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: api.test\r\nHost: other.test\r\nX: %s\r\n\r\n",
    ],
)
async def test_requests_not_aimed_at_the_host_go_out_unsubstituted(head: bytes) -> None:
    out = await _rewrite([head % PH])
    assert SECRET not in out and PH in out


async def test_a_body_over_the_limit_streams_unchanged() -> None:
    body = PH + b"a" * BODY_LIMIT
    raw = b"POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\n\r\n" % len(body)
    out = await _rewrite([raw, body[:1000], body[1000:]])
    assert out == raw + body


@pytest.mark.parametrize(
    "head",
    [
        b"POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: api.test\r\nX: a\r\n folded\r\n\r\n",
    ],
)
async def test_ambiguous_framing_is_refused(head: bytes) -> None:
    with pytest.raises(ValueError):
        await _rewrite([head + b"abc"])


async def test_header_secret_with_a_newline_is_never_put_in_a_header(tmp_path: Path) -> None:
    ca = load_or_create_ca(tmp_path, Keyring([new_key()]), "env_x")
    bad = Injection(
        placeholder=PH.decode(), secret=Hidden(b"a\r\nX-Evil: 1"), hosts=("api.test",),
        header=True, body=True,
    )  # fmt: skip
    interception = Interception(
        ca_cert_pem=ca.cert_pem, ca_key_pem=Hidden(ca.key_pem.reveal().encode()), injections=(bad,)
    )
    rules = Interceptor(interception, tmp_path).rules("api.test")
    assert rules.header == () and rules.body == ((PH, b"a\r\nX-Evil: 1"),)
    assert "a\r\n" not in repr(interception) and "X-Evil" not in repr(rules)


def test_the_ca_key_is_sealed_at_rest_and_reused(tmp_path: Path) -> None:
    keyring = Keyring([new_key()])
    first = load_or_create_ca(tmp_path, keyring, "env_a")
    stored = (tmp_path / "ca" / "env_a.json").read_text()
    assert "PRIVATE KEY" not in stored and json.loads(stored)["cert"] == first.cert_pem.decode()
    assert load_or_create_ca(tmp_path, keyring, "env_a") == first
    assert load_or_create_ca(tmp_path, keyring, "env_b").cert_pem != first.cert_pem
    rotated = Keyring([new_key(), *keyring_keys(keyring)])
    assert load_or_create_ca(tmp_path, rotated, "env_a").cert_pem == first.cert_pem
    assert f".{rotated.primary_id}." in (tmp_path / "ca" / "env_a.json").read_text()
    lost = Keyring([new_key()])  # no configured key opens it: a new CA, not a crash
    assert load_or_create_ca(tmp_path, lost, "env_a").cert_pem != first.cert_pem


def test_concurrent_first_uses_of_an_environment_get_one_ca(tmp_path: Path) -> None:
    """Regression (found by the red-team suite): sandboxes of one environment starting at once
    shared a temporary file name, so one writer's cleanup removed another's file before its
    link and the sandbox failed with FileNotFoundError."""
    keyring = Keyring([new_key()])
    for n in range(5):
        environment = f"env_race{n}"
        barrier = threading.Barrier(8)

        def first_use(
            environment: str = environment, barrier: threading.Barrier = barrier
        ) -> bytes:
            barrier.wait()
            return load_or_create_ca(tmp_path, keyring, environment).cert_pem

        with ThreadPoolExecutor(8) as pool:
            certs = set(pool.map(lambda _: first_use(), range(8)))
        assert len(certs) == 1
    assert [p.name for p in (tmp_path / "ca").iterdir() if p.name.startswith(".")] == []


def keyring_keys(keyring: Keyring) -> list[bytes]:
    return [keyring._primary]


# --- the proxy, TLS terminated for a credential host --------------------------------------


@pytest.fixture
def tls_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TlsHost]:
    host = start_tls_host(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(host.bundle))  # the "system" trust, for upstreams
    yield host
    host.stop()


async def _start_proxy(tmp_path: Path) -> tuple[EgressProxy, Path, bytes]:
    ca = load_or_create_ca(tmp_path, Keyring([new_key()]), "env_p")
    injection = Injection(
        placeholder=PH.decode(), secret=Hidden(SECRET), hosts=("127.0.0.1",),
        header=True, body=True,
    )  # fmt: skip
    interception = Interception(
        ca_cert_pem=ca.cert_pem,
        ca_key_pem=Hidden(ca.key_pem.reveal().encode()),
        injections=(injection,),
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o700, exist_ok=True)
    egress = EgressProxy(
        HostPolicy(["127.0.0.1"]),
        settings=EgressSettings(allow_private=("127.0.0.1",)),
        interceptor=Interceptor(interception, scratch),
    )
    sock = tmp_path / f"egress-{id(egress)}.sock"
    await egress.start(sock)
    return egress, sock, ca.cert_pem


@pytest.fixture
async def proxy(tmp_path: Path, tls_host: TlsHost) -> AsyncIterator[tuple[Path, bytes]]:
    egress, sock, ca_pem = await _start_proxy(tmp_path)
    yield sock, ca_pem
    await egress.aclose()
    assert list((tmp_path / "scratch").iterdir()) == []  # leaf keys never stay on disk


async def _through_proxy(
    sock: Path, port: int, ca_pem: bytes, request: bytes
) -> tuple[bytes, dict[str, Any]]:
    reader, writer = await asyncio.open_unix_connection(str(sock))
    writer.write(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % port)
    answer = await reader.readuntil(b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer
    context = ssl.create_default_context(cadata=ca_pem.decode())
    await writer.start_tls(context, server_hostname="127.0.0.1")
    peer = writer.get_extra_info("peercert")
    writer.write(request)
    await writer.drain()
    response = await reader.read(4096)
    writer.close()
    return response, peer


async def test_https_to_a_credential_host_arrives_with_the_secret(
    proxy: tuple[Path, bytes], tls_host: TlsHost
) -> None:
    sock, ca_pem = proxy
    body = b'{"token": "' + PH + b'"}'
    request = (
        b"POST /hook HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-Api-Key: %s\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (tls_host.port, PH, len(body)) + body
    )
    response, peer = await _through_proxy(sock, tls_host.port, ca_pem, request)
    assert response.startswith(b"HTTP/1.1 200") and SECRET not in response
    assert ("IP Address", "127.0.0.1") in peer["subjectAltName"]  # our leaf, not the host's
    (seen,) = tls_host.seen
    assert seen.headers["X-Api-Key"] == SECRET.decode()
    assert seen.body == b'{"token": "' + SECRET + b'"}'


async def test_an_untrusted_upstream_is_a_502_before_the_tunnel(
    tmp_path: Path, tls_host: TlsHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", os.devnull)  # the server does not trust the test CA
    egress, sock, _ = await _start_proxy(tmp_path)
    try:
        reader, writer = await asyncio.open_unix_connection(str(sock))
        writer.write(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % tls_host.port)
        answer = await reader.read(4096)
        writer.close()
    finally:
        await egress.aclose()
    assert answer.startswith(b"HTTP/1.1 502"), answer
    assert b"certificate verify failed" in answer and tls_host.seen == []


async def test_other_hosts_stay_opaque_tunnels(tmp_path: Path, tls_host: TlsHost) -> None:
    """A CONNECT to a host no credential names is relayed as is: the client sees the host's
    own certificate (from the test CA), not a leaf of the environment's CA."""
    ca = load_or_create_ca(tmp_path, Keyring([new_key()]), "env_o")
    injection = Injection(
        placeholder=PH.decode(), secret=Hidden(SECRET), hosts=("api.test",),
        header=True, body=True,
    )  # fmt: skip
    interception = Interception(
        ca_cert_pem=ca.cert_pem, ca_key_pem=Hidden(ca.key_pem.reveal().encode()),
        injections=(injection,),
    )  # fmt: skip
    egress = EgressProxy(
        HostPolicy(["127.0.0.1"]),
        settings=EgressSettings(allow_private=("127.0.0.1",)),
        interceptor=Interceptor(interception, tmp_path),
    )
    await egress.start(tmp_path / "o.sock")
    try:
        request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX: %s\r\nConnection: close\r\n\r\n" % PH
        response, _ = await _through_proxy(
            tmp_path / "o.sock", tls_host.port, tls_host.ca_file.read_bytes(), request
        )
    finally:
        await egress.aclose()
    assert response.startswith(b"HTTP/1.1 200")
    assert tls_host.seen[0].headers["X"] == PH.decode()


async def test_expect_continue_is_answered_by_the_proxy() -> None:
    """The body must be read before the head can go (its length changes), so the proxy
    answers `100 Continue` itself and drops `Expect` from what it forwards."""
    raw = (
        b"POST / HTTP/1.1\r\nHost: api.test\r\nExpect: 100-continue\r\n"
        b"Content-Length: %d\r\n\r\n" % len(PH) + PH
    )
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    sink, client = _Sink(), _Sink()
    await relay_requests(
        reader, cast(asyncio.StreamWriter, sink), RULES, HOST, PORT, lambda n: True,
        client=cast(asyncio.StreamWriter, client),
    )  # fmt: skip
    assert client.data == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert b"Expect" not in sink.data and sink.data.endswith(SECRET)


async def test_the_budget_stops_the_rewriter() -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(b"GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
    reader.feed_eof()
    sink = _Sink()
    with pytest.raises(Exception, match="budget"):
        await relay_requests(
            reader, cast(asyncio.StreamWriter, sink), RULES, HOST, PORT, lambda n: False
        )
    assert sink.data == b""


def test_an_unrestricted_credential_opens_every_host(tmp_path: Path) -> None:
    ca = load_or_create_ca(tmp_path, Keyring([new_key()]), "env_u")
    injections = (
        Injection(placeholder="p1", secret=Hidden(b"s1"), hosts=None, header=True, body=False),
        Injection(
            placeholder="p2", secret=Hidden(b"s2"), hosts=("*.api.test",), header=False, body=True
        ),
    )
    interception = Interception(
        ca_cert_pem=ca.cert_pem, ca_key_pem=Hidden(ca.key_pem.reveal().encode()),
        injections=injections,
    )  # fmt: skip
    interceptor = Interceptor(interception, tmp_path)
    assert interceptor.intercepts("anything.example")
    assert interceptor.rules("anything.example") == Rules(header=((b"p1", b"s1"),))
    assert interceptor.rules("v1.api.test") == Rules(
        header=((b"p1", b"s1"),), body=((b"p2", b"s2"),)
    )


async def test_address_rules_still_apply_to_credential_hosts(
    tmp_path: Path, tls_host: TlsHost
) -> None:
    """Without the operator's `allow_private`, the loopback stays refused even though a
    credential names it: nothing is connected, intercepted or substituted."""
    ca = load_or_create_ca(tmp_path, Keyring([new_key()]), "env_r")
    injection = Injection(
        placeholder=PH.decode(), secret=Hidden(SECRET), hosts=("127.0.0.1",),
        header=True, body=True,
    )  # fmt: skip
    interception = Interception(
        ca_cert_pem=ca.cert_pem, ca_key_pem=Hidden(ca.key_pem.reveal().encode()),
        injections=(injection,),
    )  # fmt: skip
    egress = EgressProxy(HostPolicy(["127.0.0.1"]), interceptor=Interceptor(interception, tmp_path))
    await egress.start(tmp_path / "r.sock")
    try:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "r.sock"))
        writer.write(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % tls_host.port)
        answer = await reader.read(4096)
        writer.close()
    finally:
        await egress.aclose()
    assert answer.startswith(b"HTTP/1.1 403") and b"allow_private" in answer
    assert tls_host.seen == []
