"""LocalHands passes the whole Hands conformance suite (functional and isolation parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.hands.conformance import FUNCTIONAL, ISOLATION, Check, run_check
from corral.hands.local import LocalHands
from tests.hands.conftest import needs_bwrap
from tests.uids import WORKER_UIDS

pytestmark = [pytest.mark.bwrap, needs_bwrap, pytest.mark.anyio]


@pytest.mark.parametrize("check", [*FUNCTIONAL, *ISOLATION], ids=lambda c: c.__name__)
async def test_local_hands_conform(check: Check, tmp_path: Path) -> None:
    await run_check(check, LocalHands, tmp_path)


@pytest.mark.parametrize("check", ISOLATION, ids=lambda c: c.__name__)
async def test_local_hands_conform_without_cgroups(check: Check, tmp_path: Path) -> None:
    """The isolation part also holds with rlimits only (hosts without writable cgroups)."""
    if check.__name__ == "fork_bomb_is_contained":
        pytest.skip("a root-mapped sandbox needs a pids cgroup to contain a fork bomb")
    await run_check(
        check, lambda root: LocalHands(root, uid_range=WORKER_UIDS, use_cgroups=False), tmp_path
    )
