"""The self-hosted work queue's contract suite, run against every backend."""

from __future__ import annotations

import pytest

import corral.store.conformance_work as work_checks
from corral.store.base import Store
from corral.store.conformance_support import Check
from corral.store.conformance_work import WORK_CHECKS


@pytest.mark.anyio
@pytest.mark.parametrize("check", WORK_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_work_contract(store: Store, check: Check) -> None:
    await check(store)


def test_every_work_check_is_listed_once() -> None:
    defined = sorted(name for name in dir(work_checks) if name.startswith("check_"))
    assert sorted(c.__name__ for c in WORK_CHECKS) == defined
