"""Which credential hosts an environment's networking blocks (reported as
`credential_host_unreachable_error`)."""

from __future__ import annotations

from typing import Any

import pytest

from corral.service.egress_credentials import blocked_hosts

LIMITED: dict[str, Any] = {"type": "limited", "allowed_hosts": ["api.test", "*.corp.test"]}


@pytest.mark.parametrize(
    ("credential_hosts", "blocked"),
    [
        (["api.test"], []),
        (["API.test"], []),
        (["other.test"], ["other.test"]),
        (["x.corp.test", "corp.test"], ["corp.test"]),  # *.corp.test is subdomains only
        (["*.corp.test"], []),
        (["*.a.corp.test"], []),
        (["*.test"], []),  # api.test is one of its hosts
        (["*.other.test"], ["*.other.test"]),
    ],
)
def test_limited_networking(credential_hosts: list[str], blocked: list[str]) -> None:
    credential = {"type": "limited", "allowed_hosts": credential_hosts}
    assert blocked_hosts(credential, LIMITED) == [b.lower() for b in blocked]


def test_none_blocks_every_listed_host_and_unrestricted_none() -> None:
    credential = {"type": "limited", "allowed_hosts": ["api.test"]}
    assert blocked_hosts(credential, {"type": "none"}) == ["api.test"]
    assert blocked_hosts(credential, {"type": "unrestricted"}) == []
    assert blocked_hosts({"type": "unrestricted"}, {"type": "none"}) == []
