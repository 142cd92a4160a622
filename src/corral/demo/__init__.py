"""The offline incident-triage demo: generated data, the four custom tools, and an SDK-only runner.

Act 1 (`runner`, `story`) triages the pages and writes a post-mortem; act 2 (`team_runner`,
`team_story`, `team_workers`) has a coordinator delegate the follow-up to two threads and save
the lessons to a memory store that a later session reads. Nothing here touches the server's
internals; the runners speak to Corral only through `anthropic`.
"""

from corral.demo.data import CULPRIT_COMMITS, DemoData, generate
from corral.demo.tools import handle_tool, is_error_result, tool_definitions

__all__ = [
    "CULPRIT_COMMITS",
    "DemoData",
    "generate",
    "handle_tool",
    "is_error_result",
    "tool_definitions",
]
