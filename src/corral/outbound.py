"""HTTP clients for what the server fetches on an agent's behalf, under the egress address rules.

MCP servers, OAuth token endpoints, web search providers and git remotes are named by API
clients and agent configurations, so an unchecked fetch would be a server-side request forgery
(the server's own database, cloud metadata, the internal network). Every new connection of a
`guarded_client` resolves the name once with `corral.netpolicy.admit` and connects only to the
addresses that passed, numerically: a second lookup cannot rebind the name. The Host header and
the TLS server name keep the name, so certificates are verified as usual.

Proxy environment variables are ignored (`trust_env=False`): a proxy would make the decision
on our behalf, on addresses we never saw.

Destinations the operator configured (model providers) are not guarded: they go through the
operator's proxy (`environment_proxy`) and trust store (`trust_context`), as any client would.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import ssl
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import httpcore
import httpx

from corral.netpolicy import AddressPolicy, admit

__all__ = [
    "GuardedBackend",
    "OutboundRefused",
    "environment_proxy",
    "guarded_client",
    "server_policy",
    "trust_context",
]


class OutboundRefused(httpx.ConnectError):
    """The destination resolves to an address the policy refuses; the message says which."""


def server_policy(allow_private: Iterable[str]) -> AddressPolicy:
    """The policy for server-side fetches: the operator's `[egress] allow_private` rules."""
    return AddressPolicy.from_entries(allow_private)


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that admits each TCP destination before connecting."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        decision = await admit(host, port, self._policy)
        if not decision.allowed:
            raise OutboundRefused(f"refused to connect to {host}:{port}: {decision.reason}")
        last: Exception | None = None
        for address in decision.addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc  # try the next checked address, as a resolver-driven connect would
        assert last is not None  # admit never allows an empty address list
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise OutboundRefused("server-side fetches never use unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, policy: AddressPolicy, verify: ssl.SSLContext | bool, http2: bool) -> None:
        context = verify if isinstance(verify, ssl.SSLContext) else _context(verify, http2)
        super().__init__(verify=context, http2=http2, trust_env=False)
        # httpx does not expose the network backend; the pool it built is replaced by the same
        # pool over our backend (tests prove the refusal, so a change in httpx cannot hide).
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context, http1=True, http2=http2, network_backend=GuardedBackend(policy)
        )


def _context(verify: bool, http2: bool) -> ssl.SSLContext:
    """The shared context for a trust setting. Loading the trust store costs a tenth of a
    second of CPU, on the event loop: building one (two, with httpx's own) per client stalled
    the server when many sessions connected to MCP servers and git remotes at once (found by
    the red-team suite). Keyed by the variables the default trust store honours, and by HTTP/2,
    because httpcore sets the ALPN protocols on the context at every connection."""
    env = (os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    return _shared_context(verify, http2, *env)


@functools.lru_cache(maxsize=16)
def _shared_context(
    verify: bool, http2: bool, cert_file: str | None, cert_dir: str | None
) -> ssl.SSLContext:
    context = ssl.create_default_context()  # honours SSL_CERT_FILE / SSL_CERT_DIR
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def guarded_client(
    policy: AddressPolicy,
    *,
    verify: ssl.SSLContext | bool = True,
    http2: bool = False,
    **kwargs: Any,
) -> httpx.AsyncClient:
    """An `httpx.AsyncClient` whose connections obey `policy`; `kwargs` go to the client
    (timeout, headers, auth, follow_redirects...). Redirects are checked like any connection.
    """
    transport = _GuardedTransport(policy, verify, http2)
    return httpx.AsyncClient(transport=transport, trust_env=False, **kwargs)


def trust_context() -> ssl.SSLContext:
    """The shared verifying HTTP/1.1 context: the system roots, or those `SSL_CERT_FILE` /
    `SSL_CERT_DIR` name (what TLS-inspecting corporate networks hand their clients)."""
    return _context(True, False)


def environment_proxy(url: str, env: Mapping[str, str]) -> httpcore.Proxy | None:
    """The proxy `env` names for `url`, or None (no proxy set, or `NO_PROXY` covers the host).

    `HTTPS_PROXY` for https URLs, `HTTP_PROXY` for http ones, `ALL_PROXY` for both; the
    lower-case form of a variable wins over the upper-case one, as in curl and httpx. A proxy
    URL may hold credentials (sent as `Proxy-Authorization`) and may itself be https.

    Raises:
        ValueError: the proxy is not an http(s) URL with a host (naming the variable).
    """
    scheme = urlsplit(url).scheme
    found = _first_set(env, f"{scheme}_proxy", "all_proxy")
    if found is None:
        return None
    name, value = found
    no_proxy = _first_set(env, "no_proxy")
    if no_proxy is not None and _bypassed(urlsplit(url), no_proxy[1]):
        return None
    return _proxy(name, value if "://" in value else f"http://{value}")


def _bypassed(url: SplitResult, no_proxy: str) -> bool:
    """Whether a `NO_PROXY` list covers the URL's host, as curl reads it: `*` covers all; an
    entry covers its name and subdomains (a leading dot is ignored), an IP address or CIDR
    range the addresses in it; `host:port` only that port."""
    host = (url.hostname or "").lower()
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        name, _, entry_port = entry.rpartition(":") if _has_port(entry) else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.strip("[]").lstrip(".")
        if not name:
            continue
        if address is not None:
            with contextlib.suppress(ValueError):
                if address in ipaddress.ip_network(name, strict=False):
                    return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def _has_port(entry: str) -> bool:
    """`host:port` or `[v6]:port`, not a bare IPv6 address."""
    head, colon, tail = entry.rpartition(":")
    return bool(colon) and tail.isdigit() and (head.endswith("]") or ":" not in head)


def _first_set(env: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    for name in names:
        for spelled in (name, name.upper()):
            if env.get(spelled, "").strip():
                return spelled, env[spelled].strip()
    return None


def _proxy(name: str, value: str) -> httpcore.Proxy:
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
        raise ValueError(f"{name}={value!r} is not an http:// or https:// proxy URL with a host")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    origin = f"{parts.scheme}://{host}" + (f":{port}" if port else "")
    auth = None
    if parts.username is not None:
        auth = (unquote(parts.username), unquote(parts.password or ""))
    tls = trust_context() if parts.scheme == "https" else None
    return httpcore.Proxy(origin, auth=auth, ssl_context=tls)
