"""Where the server's outbound connections may go, decided on addresses after one resolution.

Used by the sandboxes' egress proxy (`hands/_egress.py`) and meant for every other connection
the server opens on behalf of an API client or a model (MCP servers, OAuth token endpoints,
git remotes, web search): resolve once with `resolve`, decide with `check_destination`, then
connect only to `Decision.addresses` (numeric, so no second lookup can rebind the name).

A destination is reachable when every address it resolves to is public and is not one of this
host's own addresses, IPv4 embedded in IPv6 included (mapped, translated, compatible, NAT64,
6to4; Teredo and local-use NAT64 are refused outright). The operator may open private
destinations with `allow_private` rules (`host:port`, a CIDR or bare IP, or a name meaning all
its ports); an operator rule wins over every address check, the host's own addresses included.

This module must not import any other corral module (so that anything may use it; `session/`
and `store/` never need it), and does no I/O beyond DNS lookups and reading `/proc/net`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_V6 = ipaddress.IPv6Network
_COMPATIBLE = _V6("::/96")  # deprecated IPv4-compatible ::a.b.c.d
_TRANSLATED = _V6("::ffff:0:0:0/96")  # SIIT, RFC 2765
_NAT64 = _V6("64:ff9b::/96")  # RFC 6052 well-known prefix
_REFUSED_V6 = (
    _V6("64:ff9b:1::/48"),  # local-use NAT64 (RFC 8215): where the IPv4 sits is site-defined
    _V6("2001::/32"),  # Teredo: a tunnel to an obfuscated IPv4 through a relay
    _V6("fec0::/10"),  # deprecated site-local, still routed internally on some networks
)
_OWN_TTL = 2.0
"""Seconds a snapshot of this host's addresses is reused (addresses change rarely)."""
_RESOLVERS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="corral-resolve")
"""getaddrinfo blocks: its own small pool, so slow lookups never starve other thread users."""


MAX_CONNECTIONS = 64
BYTES_BUDGET = 10 * 1024**3
IDLE_SECONDS = 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class EgressSettings:
    """The operator's egress settings (`[egress]` in corral.toml), applied per sandbox."""

    allow_private: tuple[str, ...] = ()
    """Private destinations sandboxes may reach when their environment names the host."""
    max_connections: int = MAX_CONNECTIONS
    """Concurrent connections through one sandbox's proxy (each holds <= 2 server fds)."""
    bytes_budget: int = BYTES_BUDGET
    """Bytes relayed (both directions) over one sandbox's life."""
    idle_seconds: float = IDLE_SECONDS
    """A relayed connection with no traffic either way for this long is closed."""


def _norm(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches on dual-stack, NAT64 or 6to4 networks."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _TRANSLATED or ip in _NAT64 or ip in _COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def parse_address(address: str | IPAddress) -> IPAddress:
    """An address without its IPv6 zone (`fe80::1%eth0` is link-local whatever the zone).

    Raises:
        ValueError: not an IP address.
    """
    if isinstance(address, str):
        return ipaddress.ip_address(address.split("%", 1)[0])
    return address


def _globally_routable(ip: IPAddress) -> bool:
    if ip.is_multicast or not ip.is_global:
        return False
    return not (isinstance(ip, ipaddress.IPv6Address) and any(ip in n for n in _REFUSED_V6))


def is_public(address: str | IPAddress) -> bool:
    """Whether an address is globally routable, judging embedded IPv4 by itself.

    Raises:
        ValueError: not an IP address.
    """
    ip = parse_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        v4 = embedded_ipv4(ip)
        if v4 is not None:
            return _globally_routable(v4)
    return _globally_routable(ip)


class _OwnAddresses:
    """This host's addresses (IPv4 local routes, IPv6 interface addresses), briefly cached."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._networks: tuple[IPNetwork, ...] = ()
        self._expires = 0.0

    def __contains__(self, ip: IPAddress) -> bool:
        now = time.monotonic()
        with self._lock:
            if now >= self._expires:
                self._networks = _read_own_networks()
                self._expires = now + _OWN_TTL
            networks = self._networks
        return any(ip.version == n.version and ip in n for n in networks)


def _read_own_networks() -> tuple[IPNetwork, ...]:
    """Every `host LOCAL` entry of the IPv4 FIB (addresses and `ip route add local` ranges)
    plus every address in /proc/net/if_inet6; without /proc, what `bind()` calls say."""
    try:
        fib = Path("/proc/net/fib_trie").read_text()
    except OSError:
        fib = ""
    found: set[IPNetwork] = set()
    prefix = ""
    for line in fib.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].endswith("--"):  # "|-- 10.0.0.1" / "+-- 10.0.0.0/8 ..."
            prefix = words[1].split("/", 1)[0]
        elif len(words) >= 3 and words[0].startswith("/") and words[1:3] == ["host", "LOCAL"]:
            found.add(ipaddress.IPv4Network(f"{prefix}{words[0]}", strict=False))
    try:
        inet6 = Path("/proc/net/if_inet6").read_text()
    except OSError:
        inet6 = ""
    for line in inet6.splitlines():
        hex_address = line.split()[0] if line.strip() else ""
        if len(hex_address) == 32:
            found.add(ipaddress.IPv6Network(int(hex_address, 16)))
    if not fib:  # no procfs: loopback at least, the rest is checked by bind() in is_own_address
        found.add(ipaddress.IPv4Network("127.0.0.0/8"))
    return tuple(found)


_OWN = _OwnAddresses()


def _binds(ip: IPAddress) -> bool:
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(ip), 0))
    except OSError:
        return False
    return True


def is_own_address(address: str | IPAddress) -> bool:
    """Whether connecting to `address` would reach this host itself (any of its interfaces,
    loopback, or a local route), embedded IPv4 included.

    Raises:
        ValueError: not an IP address.
    """
    ip = parse_address(address)
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address) and (v4 := embedded_ipv4(ip)) is not None:
        candidates.append(v4)
    if any(c in _OWN or c.is_unspecified for c in candidates):  # 0.0.0.0 / :: mean "this host"
        return True
    if not Path("/proc/net/fib_trie").exists():
        return any(_binds(c) for c in candidates if not c.is_multicast)
    return False


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str | None
    network: IPNetwork | None
    port: int | None

    def covers(self, host: str, port: int, ip: IPAddress) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.name is not None:
            return self.name == host
        assert self.network is not None
        v4 = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
        return any(a.version == self.network.version and a in self.network for a in (ip, v4) if a)


def _parse_port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"allow_private entry {entry!r}: port must be 1-65535")
    return int(text)


def _is_name(text: str) -> bool:
    labels = text.split(".")
    return all(0 < len(x) < 64 and x.replace("-", "").isalnum() and x.isascii() for x in labels)


def parse_rule(entry: str) -> _Rule:
    """One `allow_private` entry: `host:port`, `[v6]:port`, a CIDR or IP, or a host name.

    Raises:
        ValueError: with the entry and what is wrong with it.
    """
    text = entry.strip().lower()
    if "/" in text:
        try:
            return _Rule(None, ipaddress.ip_network(text, strict=False), None)
        except ValueError as e:
            raise ValueError(f"allow_private entry {entry!r}: {e}") from None
    try:
        return _Rule(None, ipaddress.ip_network(text.strip("[]")), None)
    except ValueError:
        pass
    host, port = text, None
    if text.startswith("[") and "]:" in text:
        host, port_text = text[1:].split("]:", 1)
        port = _parse_port(port_text, entry)
    elif text.count(":") == 1:
        host, port_text = text.split(":")
        port = _parse_port(port_text, entry)
    try:
        return _Rule(None, ipaddress.ip_network(host), port)
    except ValueError:
        pass
    host = host.rstrip(".")
    if not host or not _is_name(host):
        raise ValueError(
            f"allow_private entry {entry!r}: expected host:port, a CIDR, an IP or a host name"
        )
    return _Rule(host, None, port)


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which private destinations the operator opened, and how to recognise this host.

    `own` answers whether an address is one of this host's; tests may pass a stand-in.
    """

    rules: tuple[_Rule, ...] = ()
    own: Callable[[IPAddress], bool] = is_own_address

    @classmethod
    def from_entries(cls, allow_private: Iterable[str] = ()) -> AddressPolicy:
        """Parse the operator's `allow_private` entries.

        Raises:
            ValueError: an entry is malformed.
        """
        return cls(tuple(parse_rule(e) for e in allow_private if e.strip()))

    def public_only(self) -> AddressPolicy:
        """The same policy without the operator's private destinations."""
        return replace(self, rules=())

    def operator_allows(self, host: str, port: int, ip: IPAddress) -> bool:
        """Whether an `allow_private` rule covers this destination."""
        return any(rule.covers(_norm(host), port, ip) for rule in self.rules)


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to connect, and to which addresses (numeric, in resolution order)."""

    allowed: bool
    addresses: tuple[str, ...]
    reason: str = ""
    """Why not, naming the offending address (empty when allowed)."""


def _refusal(ip: IPAddress, policy: AddressPolicy) -> str:
    v4 = embedded_ipv4(ip) if isinstance(ip, ipaddress.IPv6Address) else None
    shown = f"{ip} (which reaches {v4})" if v4 is not None else str(ip)
    if policy.own(ip) or (v4 is not None and policy.own(v4)):
        return f"{shown} is one of this host's own addresses"
    if not is_public(ip):
        return f"{shown} is not a public address"
    return ""


def check_destination(
    host: str, port: int, resolved_addresses: Sequence[str], policy: AddressPolicy
) -> Decision:
    """Decide on the addresses `host` resolved to (once, by the caller); never looks it up.

    Every address must be public and not this host's own, or be covered by an operator rule.
    """
    if not resolved_addresses:
        return Decision(False, (), f"{host!r} resolves to no address")
    for address in resolved_addresses:
        try:
            ip = parse_address(address)
        except ValueError:
            return Decision(False, (), f"{address!r} is not an IP address")
        reason = _refusal(ip, policy)
        if reason and not policy.operator_allows(host, port, ip):
            return Decision(False, (), reason)
    return Decision(True, tuple(dict.fromkeys(resolved_addresses)))


def _literal(host: str) -> str | None:
    try:
        return str(parse_address(_norm(host))) if "%" not in host else None
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[str]:
    """Every address of `host` (an IP literal is its own answer), in getaddrinfo's order.

    Raises:
        OSError: the name does not resolve.
    """
    if (literal := _literal(host)) is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    infos = await loop.run_in_executor(
        _RESOLVERS, socket.getaddrinfo, _norm(host), port, 0, socket.SOCK_STREAM
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def admit(host: str, port: int, policy: AddressPolicy) -> Decision:
    """`resolve` once, then `check_destination`; a name that does not resolve is refused.

    For server-side fetchers: connect only to `Decision.addresses`, numerically (e.g.
    `AI_NUMERICHOST`), keeping `host` for the Host header and TLS server name.
    """
    try:
        addresses = await resolve(host, port)
    except OSError as e:
        return Decision(False, (), f"{host!r} does not resolve: {e.strerror or e}")
    return check_destination(host, port, addresses, policy)
