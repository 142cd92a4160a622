"""The SDK's own `EnvironmentWorker`, unchanged, as a separate process (tests SIGKILL it).

CORRAL_ENVIRONMENT_KEY=… python -m tests.self_hosted.sdk_worker URL ENV_ID WORKDIR
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import anthropic
from anthropic.lib.environments import EnvironmentWorker


async def main(url: str, environment_id: str, workdir: str) -> None:
    client = anthropic.AsyncAnthropic(base_url=url, api_key="unused-by-the-worker")
    worker = EnvironmentWorker(
        client,
        environment_id=environment_id,
        environment_key=os.environ["CORRAL_ENVIRONMENT_KEY"],
        workdir=workdir,
        max_idle=float(os.environ.get("WORKER_MAX_IDLE", "60")),
        memory_sync_interval=None,
    )
    await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(main(*sys.argv[1:4]))
