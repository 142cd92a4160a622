"""The shared `Store` contract suite, run against every backend."""

from __future__ import annotations

import pytest

from corral.store.base import Store
from corral.store.conformance import ALL_CHECKS, Check


@pytest.mark.anyio
@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_store_contract(store: Store, check: Check) -> None:
    await check(store)


def test_every_check_is_listed_once() -> None:
    import corral.store.conformance as log_checks
    import corral.store.conformance_calls as call_checks
    import corral.store.conformance_memory as memory_checks
    import corral.store.conformance_resources as resource_checks

    defined = {
        name
        for module in (log_checks, call_checks, resource_checks, memory_checks)
        for name in dir(module)
        if name.startswith("check_")
    }
    listed = [c.__name__ for c in ALL_CHECKS]
    assert sorted(listed) == sorted(defined)
