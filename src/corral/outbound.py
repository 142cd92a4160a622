"""HTTP clients for what the server fetches on an agent's behalf, under the egress address rules.

MCP servers, OAuth token endpoints, web search providers and git remotes are named by API
clients and agent configurations, so an unchecked fetch would be a server-side request forgery
(the server's own database, cloud metadata, the internal network). Every new connection of a
`guarded_client` resolves the name once with `corral.netpolicy.admit` and connects only to the
addresses that passed, numerically: a second lookup cannot rebind the name. The Host header and
the TLS server name keep the name, so certificates are verified as usual.

Proxy environment variables are ignored (`trust_env=False`): a proxy would make the decision
on our behalf, on addresses we never saw.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from corral.netpolicy import AddressPolicy, admit

__all__ = ["GuardedBackend", "OutboundRefused", "guarded_client", "server_policy"]


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
