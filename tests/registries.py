"""Where the package registries live on the machine running the tests.

Some build machines reach PyPI and npm through a mirror at a non-public address (their
resolver maps `pypi.org` to it). Egress refuses non-public addresses unless the operator lists
them in `[egress] allow_private`, exactly as a real deployment with an internal mirror must, so
tests that install packages list the registry names that resolve privately here.
"""

from __future__ import annotations

import functools
import socket
from concurrent.futures import ThreadPoolExecutor

from corral.hands._egress import PACKAGE_MANAGER_HOSTS
from corral.netpolicy import is_public


@functools.cache
def private_registry_hosts() -> tuple[str, ...]:
    """Registry names that resolve to a non-public address on this machine.

    Resolved once per process and all at once: a name this machine's resolver does not know
    can take its full 5 s timeout to fail, and there are a dozen of them.
    """
    with ThreadPoolExecutor(max_workers=len(PACKAGE_MANAGER_HOSTS)) as pool:
        private = pool.map(_resolves_privately, PACKAGE_MANAGER_HOSTS)
    return tuple(host for host, hit in zip(PACKAGE_MANAGER_HOSTS, private, strict=True) if hit)


def _resolves_privately(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return any(not is_public(str(info[4][0])) for info in infos)
