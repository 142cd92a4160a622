"""The brain loop: claim -> apply new events -> decide -> act (one side effect) -> repeat,
until `decide` says Halt."""

from __future__ import annotations

import logging

import anyio

from corral.brain import events as ev
from corral.brain.actions import act
from corral.brain.decide import Halt, decide
from corral.brain.outage import LOST_RESULT, LostWrites
from corral.brain.run import BrainDeps, Run
from corral.errors import DiskFull, LeaseLost, StorageFailure
from corral.session.log import Fence

log = logging.getLogger("corral.brain")


async def drive(deps: BrainDeps, fence: Fence) -> bool:
    """Work on a claimed session until `decide` says Halt, keeping the lease alive.

    Returns True when the session was left with nothing to do (Halt, or a turn closed by a
    crash report); False when it may still have work (lease lost, stalled, cancelled, or
    handed over because this process is stopping), so the caller must keep it claimable.
    """
    session = await deps.store.get_session(fence.session_id)
    if session is None:
        return True
    run = Run(deps, fence, session, deps.memo.take(fence.session_id))
    try:
        return await _drive(run, deps, fence)
    finally:
        run.close()
        run.telemetry.finish()


async def _drive(run: Run, deps: BrainDeps, fence: Fence) -> bool:
    halted = False
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_heartbeat, deps, fence, tg.cancel_scope)
            await report_lost_writes(run, deps.lost_writes)
            halted = await _steps(run)
            if halted:
                deps.memo.keep(fence.session_id, run.folded())
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # anyio groups even a single error of the body
        lost, rest = group.split(LeaseLost)
        if rest is None:
            log.info("lease on %s lost; another brain continues", fence.session_id)
            return False
        if not all(isinstance(e, Exception) for e in rest.exceptions):
            raise
        storage, _ = rest.split(StorageFailure)
        if storage is not None:
            return _stopped_by_storage(run, _first(storage))
        log.exception("brain crashed on %s", fence.session_id)
        return await _report_crash(run, rest.exceptions[0])
    return halted


def _first(group: BaseExceptionGroup[BaseException]) -> StorageFailure:
    """The first storage failure of a (possibly nested) group."""
    first = group.exceptions[0]
    if isinstance(first, BaseExceptionGroup):
        return _first(first)
    assert isinstance(first, StorageFailure)
    return first


def _stopped_by_storage(run: Run, failure: StorageFailure) -> bool:
    """The store cannot write, so neither the step nor a crash report can be recorded now:
    remember the cause and give the session up (False: it stays claimable), so that its next
    run reports it once the store writes again. The store logged the condition itself."""
    session_id = run.fence.session_id
    log.warning("turn of %s stopped: %s; it is reported when writes resume", session_id, failure)
    run.deps.lost_writes.remember(session_id, failure, run.state.last_close_seq)
    return False


async def _report_crash(run: Run, exc: BaseException) -> bool:
    """A bug must not leave the session looking busy forever: close the turn visibly.

    True when the turn was closed (no retry: a deterministic bug would crash again)."""
    try:
        await run.append(
            ev.session_error(
                "unknown_error", f"internal error in the agent loop: {exc!r}", "exhausted"
            ),
            ev.status_idle("retries_exhausted"),
        )
    except Exception:
        log.exception("could not report the crash on %s", run.fence.session_id)
        return False
    return True


async def _steps(run: Run) -> bool:
    """Steps until Halt (True), or until this process is stopping (False): the step in
    flight finishes and its result is logged, then the session is handed over."""
    limit = run.deps.settings.max_steps_per_turn
    taken, turn = 0, -1
    while True:
        if run.deps.stopping.requested:
            log.info("handing %s over: this process is stopping", run.fence.session_id)
            return False
        state = await run.refresh()
        action = decide(state)
        if isinstance(action, Halt):
            return True
        if state.last_close_seq != turn:
            turn, taken = state.last_close_seq, 0
        taken += 1
        if taken > limit:
            await run.append(
                ev.session_error(
                    "tool_use_limit_reached_error",
                    f"the agent took more than {limit} steps in one turn",
                    "exhausted",
                ),
                ev.status_idle("retries_exhausted"),
            )
            continue
        run.deps.stats.steps += 1
        with run.telemetry.acting(action):
            await act(run, action)


async def _heartbeat(deps: BrainDeps, fence: Fence, scope: anyio.CancelScope) -> None:
    interval = deps.settings.lease_seconds / 3
    while True:
        await anyio.sleep(interval)
        if not await deps.store.heartbeat(fence, deps.settings.lease_seconds):
            log.warning("lease on %s was lost; stopping this brain", fence.session_id)
            scope.cancel()
            return


async def report_lost_writes(run: Run, lost: LostWrites) -> None:
    """Record the storage failure that stopped this session's last turn, if one did.

    Raises (and keeps the failure to report) when the store still cannot write.
    """
    session_id = run.fence.session_id
    remembered = lost.peek(session_id)
    if remembered is None:
        return
    failure, turn = remembered
    state = await run.refresh()
    # Another process may have run the session meanwhile (PostgreSQL): only the very turn
    # that stopped is ended, never a later one.
    if state.status in ("running", "rescheduling") and state.last_close_seq == turn:
        cause = failure.message
        results = [
            ev.call_result(
                call.event_id,
                call.kind,
                ev.text_content(LOST_RESULT.format(cause=cause)),
                is_error=True,
            )
            for call in state.unresolved()
            if state.started(call)
        ]
        advice = (
            "send the message again once space is freed"
            if isinstance(failure, DiskFull)
            else "send the message again"
        )
        await run.append(
            *results,
            ev.session_error(
                "unknown_error",
                f"the turn stopped because the server could not write its log: {cause}; {advice}",
                "exhausted",
            ),
            ev.status_idle("retries_exhausted"),
        )
    lost.forget(session_id)
