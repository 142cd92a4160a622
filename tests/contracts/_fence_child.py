"""Child process of the SIGSTOP fencing test (run as a script, not collected by pytest).

For each `go` line on stdin: claim a session, report it, stop itself with SIGSTOP, and once
continued append under the old fence and report `rejected`, `accepted` or `error ...`.
"""

from __future__ import annotations

import os
import signal
import sys

import anyio

from corral.errors import LeaseLost
from corral.ids import new_id
from corral.session.log import Fence
from corral.store.postgres import PostgresStore


async def _claim(store: PostgresStore, owner: str, lease: float) -> Fence:
    while True:
        fence = await store.claim(owner, lease)
        if fence is not None:
            return fence
        await anyio.sleep(0.01)


async def main(url: str, lease: float) -> None:
    store = PostgresStore(url, pool_size=2)
    await store.open()
    owner = f"child:{os.getpid()}"
    try:
        while (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() == "go":
            fence = await _claim(store, owner, lease)
            print(f"claimed {fence.session_id} {fence.token}", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            body = {"id": new_id("sevt"), "type": "agent.message", "content": []}
            try:
                await store.append(fence.session_id, [body], fence=fence)
                result = "accepted"
            except LeaseLost:
                result = "rejected"
            except Exception as exc:
                result = f"error {exc!r}"
            print(result, flush=True)
    finally:
        await store.aclose()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], float(sys.argv[2]))
