"""The offline incident-triage demo: generated data, the four custom tools, and an SDK-only runner.

Nothing here touches the server's internals; the runner speaks to Corral only through `anthropic`.
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
