"""Credential checks when a session starts working: `environment_variable` credentials
whose allowed hosts the environment's networking blocks are reported as
`session.error` `credential_host_unreachable_error` (the turn goes on; the secret is simply
never sent to those hosts)."""

from __future__ import annotations

import logging
from typing import Any

from corral.brain import events as ev
from corral.brain.run import Run

log = logging.getLogger("corral.brain")


async def credential_errors(run: Run) -> list[dict[str, Any]]:
    """`session.error` events for the session's unreachable credential hosts (none when the
    check is not wired or fails: the sandbox's provisioning then reports the problem)."""
    check = run.deps.credential_check
    if check is None:
        return []
    try:
        found = await check(run.session)
    except Exception:
        log.exception("checking the credentials of %s", run.fence.session_id)
        return []
    events = []
    for body in found:
        extra = {k: v for k, v in body.items() if k not in ("type", "message")}
        events.append(ev.session_error(body["type"], body["message"], "exhausted", **extra))
    return events
