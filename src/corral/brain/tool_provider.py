"""The seam for a family of tools the brain serves itself (issue 20).

A family says which calls are its own, what the model is offered, which `agent.tool_use`
a call of it is logged as, and how a call runs to its outcome. The brain's step code looks
families up instead of testing names: a new family is one class, given to the brain in
`BrainDeps.tools` (the built-in families are listed in `brain/actions.py`). The sandbox
toolset, MCP servers and custom tools are not families: the sandbox is where every other
built-in call goes, MCP tools are offered per turn from the servers' lists, and custom
tools are run by the client.

Generic in the run it is given (`brain.run.Run`), so this module stays below the brain's
run and its providers can live anywhere above it.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from corral.brain.state import ToolCall

RunT_contra = TypeVar("RunT_contra", contravariant=True)


class ToolProvider(Protocol[RunT_contra]):
    """One family of tools served by the brain."""

    def definitions(self, agent: dict[str, Any]) -> list[dict[str, Any]]:
        """Tool definitions to offer `agent`'s model on every request (may be none: a
        family of built-in tools is offered with the agent's toolset)."""
        ...

    def use_event(self, agent: dict[str, Any], name: str, tool_input: Any) -> dict[str, Any] | None:
        """The event logging the model's call of `name` if the family owns that name for
        `agent`; None when it does not (the next family, then the agent's toolset, decide)."""
        ...

    def owns(self, call: ToolCall) -> bool:
        """Whether a logged call is this family's to run."""
        ...

    async def run(self, run: RunT_contra, call: ToolCall, running: list[dict[str, Any]]) -> None:
        """Carry the call out, appending `running` (the turn's running status, if due) with
        its first append. A call with side effects logs `ev.tool_started` before them (at
        most once after a crash); every path ends with the call's result logged."""
        ...
