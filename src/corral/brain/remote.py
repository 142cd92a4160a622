"""Self-hosted hands: the brain's side of the work queue.

A session on a `self_hosted` environment logs `corral.hands_remote` at creation; from then on
its built-in calls are answered by a worker outside this server (`user.tool_result`), never
run here. The brain's only duties are to make sure a work item is queued whenever it waits
on such a call, and to answer, exactly once, the calls of a worker whose lease expired.
"""

from __future__ import annotations

import contextlib
import logging

import anyio

from corral.brain import events as ev
from corral.brain.decide import AnswerLost, RequestAction
from corral.brain.run import Run
from corral.errors import NotFound
from corral.store.base import Store
from corral.store.work_base import WorkItems

log = logging.getLogger("corral.brain.remote")

LOST_WORKER_RESULT = (
    "interrupted: the outcome is unknown. The self-hosted worker running this call stopped "
    "answering (its lease expired), so the call may or may not have run; it will not be run "
    "again. Check its effects before retrying."
)


async def request_action(run: Run, action: RequestAction) -> None:
    """Queue a work item if a remote call is among those awaited, then go idle naming them.

    The item comes first: a worker that polls it at once finds the calls in the log anyway.
    """
    work = run.deps.work
    remote = any(run.state.calls[i].remote for i in action.event_ids if i in run.state.calls)
    if remote and work is not None:
        await work.ensure_work(
            run.session.environment_id, run.fence.session_id, run.deps.settings.work_ttl_seconds
        )
    await run.append(ev.status_idle("requires_action", action.event_ids))


async def answer_lost(run: Run, action: AnswerLost) -> None:
    """Each lost call gets one error `user.tool_result` — the answer the SDK's runner
    recognises — appended under this brain's fence; a late result from the dead worker then
    meets an answered call and is refused (409)."""
    text = ev.text_content(LOST_WORKER_RESULT)
    await run.append(
        *(
            ev.event("user.tool_result", tool_use_id=c.event_id, content=text, is_error=True)
            for c in action.calls
        )
    )


async def report_lost_workers(store: Store, work: WorkItems) -> int:
    """Expire leases and tell each lost item's session (`corral.worker_lost`, waking its brain).

    Telling twice (two processes, or a crash before `mark_lost_reported`) is harmless: the
    brain answers only calls still open, under its fence.
    """
    lost = await work.expire_work()
    for row in lost:
        with contextlib.suppress(NotFound):  # a deleted session has nobody to tell
            await store.append(
                row.session_id, [ev.event("corral.worker_lost", work_id=row.id)], wake=True
            )
        await work.mark_lost_reported(row.id)
    return len(lost)


async def tend_work(store: Store, work: WorkItems, interval: float) -> None:
    """Run `report_lost_workers` every `interval` seconds until cancelled."""
    while True:
        try:
            count = await report_lost_workers(store, work)
            if count:
                log.info("%d self-hosted work item(s) lost their worker", count)
        except Exception:  # e.g. the database is away: the next round tries again
            log.exception("work lease check failed")
        await anyio.sleep(interval)
