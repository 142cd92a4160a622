"""`corral.netpolicy`: egress decisions on resolved addresses, and the `[egress]` settings."""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path

import pytest

from corral.config import load_settings
from corral.netpolicy import (
    AddressPolicy,
    EgressSettings,
    IPAddress,
    admit,
    check_destination,
    embedded_ipv4,
    is_own_address,
    is_public,
    parse_rule,
    resolve,
)

NOT_OWN = AddressPolicy(own=lambda ip: False)
"""The rules alone, with no address of this machine counted as its own."""


@pytest.mark.parametrize(
    ("address", "embedded"),
    [
        ("::7f00:1", "127.0.0.1"),  # IPv4-compatible ::/96
        ("::a00:1", "10.0.0.1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),  # IPv4-mapped
        ("::ffff:0:7f00:1", "127.0.0.1"),  # IPv4-translated (SIIT)
        ("::ffff:0:a9fe:a9fe", "169.254.169.254"),
        ("64:ff9b::7f00:1", "127.0.0.1"),  # NAT64 well-known prefix
        ("64:ff9b::c0a8:101", "192.168.1.1"),
        ("2002:7f00:1::", "127.0.0.1"),  # 6to4
        ("2002:a00:1:1::1", "10.0.0.1"),
        ("::1", "0.0.0.1"),
    ],
)
def test_embedded_ipv4_is_judged_by_itself(address: str, embedded: str) -> None:
    ip = ipaddress.IPv6Address(address)
    assert embedded_ipv4(ip) == ipaddress.IPv4Address(embedded)
    assert not is_public(address)
    decision = check_destination("evil.example", 443, [address], NOT_OWN)
    assert not decision.allowed and decision.addresses == ()
    assert f"reaches {embedded}" in decision.reason and "not a public address" in decision.reason


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
        "0.0.0.0", "192.0.2.1", "198.18.0.1", "240.0.0.1", "255.255.255.255", "224.0.0.1",
        "239.1.2.3", "::", "::1", "fe80::1", "fe80::1%eth0", "fc00::1", "fd00::2", "ff02::1",
        "ff0e::1", "2001:db8::1", "100::1",
        "fec0::1",  # site-local: counted global by Python 3.11
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo, however public its parts
        "2001:0:808:808:8000:63bf:3fff:fdd2",
        "64:ff9b:1::808:808",  # local-use NAT64: the IPv4's place is site-defined
        "64:ff9b:1:ffff::808:808",
    ],
)  # fmt: skip
def test_internal_addresses_are_refused(address: str) -> None:
    assert not is_public(address)
    decision = check_destination("h.example", 80, [address], NOT_OWN)
    assert not decision.allowed and "not a public address" in decision.reason


@pytest.mark.parametrize(
    "address",
    ["1.1.1.1", "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1",
     "::ffff:8.8.8.8"],
)  # fmt: skip
def test_public_addresses_are_allowed(address: str) -> None:
    assert is_public(address)
    decision = check_destination("h.example", 443, [address, address], NOT_OWN)
    assert decision.allowed and decision.addresses == (address,)


def test_every_address_must_pass() -> None:
    decision = check_destination("rebind.example", 443, ["8.8.8.8", "127.0.0.1"], NOT_OWN)
    assert not decision.allowed and "127.0.0.1 is not a public address" in decision.reason
    assert not check_destination("gone.example", 443, [], NOT_OWN).allowed
    assert not check_destination("odd.example", 443, ["not-an-ip"], NOT_OWN).allowed


def test_the_hosts_own_addresses_are_refused_even_when_public() -> None:
    own: set[IPAddress] = {ipaddress.ip_address("8.8.8.8")}
    policy = AddressPolicy(own=lambda ip: ip in own)
    for address in ("8.8.8.8", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1"):
        decision = check_destination("me.example", 443, [address], policy)
        assert not decision.allowed, address
        assert "one of this host's own addresses" in decision.reason
    assert check_destination("them.example", 443, ["8.8.4.4"], policy).allowed


def _own_non_loopback() -> list[str]:
    out = subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return []
    return [
        a["local"]
        for link in json.loads(out.stdout)
        for a in link.get("addr_info", [])
        if not ipaddress.ip_address(a["local"]).is_loopback
    ]


def test_this_machines_addresses_are_its_own() -> None:
    assert is_own_address("127.0.0.1") and is_own_address("127.8.9.10")
    assert is_own_address("0.0.0.0") and is_own_address("::")
    assert is_own_address("::ffff:127.0.0.1")
    assert not is_own_address("192.0.2.222") or "192.0.2.222" in _own_non_loopback()
    addresses = _own_non_loopback()
    if not addresses:
        pytest.skip("this machine has no non-loopback address")
    for address in addresses:
        assert is_own_address(address), address
        decision = check_destination("me.example", 80, [address], AddressPolicy())
        assert not decision.allowed and "this host's own addresses" in decision.reason


@pytest.mark.parametrize(
    ("entry", "host", "port", "address", "covered"),
    [
        ("registry.internal:8443", "registry.internal", 8443, "10.0.0.5", True),
        ("registry.internal:8443", "REGISTRY.internal.", 8443, "10.0.0.5", True),
        ("registry.internal:8443", "registry.internal", 443, "10.0.0.5", False),
        ("registry.internal:8443", "other.internal", 8443, "10.0.0.5", False),
        ("mirror.lan", "mirror.lan", 1, "192.168.0.9", True),
        ("mirror.lan", "mirror.lan", 65535, "127.0.0.1", True),
        ("10.0.0.0/8", "anything.example", 22, "10.200.0.1", True),
        ("10.0.0.0/8", "anything.example", 22, "64:ff9b::a00:1", True),
        ("10.0.0.0/8", "anything.example", 22, "192.168.0.1", False),
        ("127.0.0.1", "x", 5432, "127.0.0.1", True),
        ("127.0.0.1", "x", 5432, "127.0.0.2", False),
        ("127.0.0.1:8080", "x", 8080, "127.0.0.1", True),
        ("127.0.0.1:8080", "x", 5432, "127.0.0.1", False),
        ("[::1]:8080", "x", 8080, "::1", True),
        ("::1", "x", 1, "::1", True),
        ("fd00::/8", "x", 1, "fd12::1", True),
    ],
)
def test_allow_private_rules(entry: str, host: str, port: int, address: str, covered: bool) -> None:
    policy = AddressPolicy.from_entries([entry])
    assert check_destination(host, port, [address], policy).allowed is covered
    assert not check_destination(host, port, [address], policy.public_only()).allowed


@pytest.mark.parametrize(
    "entry", ["10.0.0.0/33", "host:0", "host:99999", "host:http", "a b", "http://x", ":80", "a:b:c"]
)
def test_malformed_allow_private_entries_are_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="allow_private entry"):
        parse_rule(entry)


def test_egress_settings_from_toml_and_environment(tmp_path: Path) -> None:
    toml = tmp_path / "corral.toml"
    toml.write_text(
        '[egress]\nallow_private = ["registry.internal:8443", "10.0.0.0/8"]\n'
        "max_connections = 8\nbytes_budget = 1000\nidle_seconds = 2.5\n"
    )
    settings = load_settings(environ={}, config_file=toml)
    assert settings.egress == EgressSettings(
        allow_private=("registry.internal:8443", "10.0.0.0/8"),
        max_connections=8,
        bytes_budget=1000,
        idle_seconds=2.5,
    )
    env = {
        "CORRAL_EGRESS_ALLOW_PRIVATE": "mirror.lan, 127.0.0.1:5000",
        "CORRAL_EGRESS_MAX_CONNECTIONS": "3",
    }
    settings = load_settings(environ=env, config_file=toml)
    assert settings.egress.allow_private == ("mirror.lan", "127.0.0.1:5000")
    assert settings.egress.max_connections == 3 and settings.egress.bytes_budget == 1000
    defaults = load_settings(environ={}, config_file=tmp_path / "missing.toml").egress
    assert defaults == EgressSettings() and defaults.allow_private == ()
    assert defaults.max_connections == 64 and defaults.bytes_budget == 10 * 1024**3
    with pytest.raises(ValueError, match="allow_private entry 'not a host'"):
        load_settings(environ={"CORRAL_EGRESS_ALLOW_PRIVATE": "not a host"}, config_file=toml)
    toml.write_text("[egress]\nmax_connections = 0\n")
    with pytest.raises(ValueError, match="max_connections must be positive"):
        load_settings(environ={}, config_file=toml)


@pytest.mark.anyio
async def test_resolve_answers_literals_without_a_lookup() -> None:
    assert await resolve("127.0.0.1", 80) == ["127.0.0.1"]
    assert await resolve("[::1]", 80) == ["::1"]
    assert "127.0.0.1" in await resolve("localhost", 80)  # /etc/hosts: no DNS traffic


@pytest.mark.anyio
async def test_admit_resolves_once_and_decides() -> None:
    """The entry point for server-side fetchers (MCP, OAuth, git, web search)."""
    refused = await admit("localhost", 5432, AddressPolicy())
    assert not refused.allowed and "127.0.0.1 is one of this host's own" in refused.reason
    operator = AddressPolicy.from_entries(["localhost:5432"])
    allowed = await admit("localhost", 5432, operator)
    assert allowed.allowed and "127.0.0.1" in allowed.addresses
    assert not (await admit("localhost", 5433, operator)).allowed
