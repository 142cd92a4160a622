"""Where the package registries live on the machine running the tests.

Some build machines reach PyPI and npm through a mirror at a non-public address (their
resolver maps `pypi.org` to it). Egress refuses non-public addresses unless the operator lists
them in `[egress] allow_private`, exactly as a real deployment with an internal mirror must, so
tests that install packages list the registry names that resolve privately here.
"""

from __future__ import annotations

import socket

from corral.hands._egress import PACKAGE_MANAGER_HOSTS
from corral.netpolicy import is_public


def private_registry_hosts() -> tuple[str, ...]:
    """Registry names that resolve to a non-public address on this machine."""
    found = []
    for host in PACKAGE_MANAGER_HOSTS:
        try:
            infos = socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
        except OSError:
            continue
        if any(not is_public(str(info[4][0])) for info in infos):
            found.append(host)
    return tuple(found)
