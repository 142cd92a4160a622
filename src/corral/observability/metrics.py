"""Prometheus metrics of this process (one registry per process; see docs/observability.md).

Event-like metrics (counters, histograms) are recorded where things happen. State-like ones
(sessions by status, the work queue) are read from the shared store when scraped, so every
process reports the same cluster-wide numbers however many processes there are.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_FAST = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

REGISTRY = CollectorRegistry(auto_describe=True)
"""This process's event metrics (plus the process and platform collectors)."""

SESSIONS_CREATED = Counter(
    "corral_sessions_created", "Sessions created through this process's API.", registry=REGISTRY
)
TURNS = Counter(
    "corral_turns",
    "Turns closed by this process's brains (a requires_action pause is not a close).",
    ["stop_reason"],
    registry=REGISTRY,
)
TURN_DURATION = Histogram(
    "corral_turn_duration_seconds",
    "From a turn's first running status to its close, as seen by the brain that closed it.",
    buckets=_SECONDS,
    registry=REGISTRY,
)
MODEL_REQUESTS = Counter(
    "corral_model_requests",
    "Model requests by model and outcome (ok; error, which includes interrupted ones).",
    ["model", "outcome"],
    registry=REGISTRY,
)
MODEL_LATENCY = Histogram(
    "corral_model_request_duration_seconds",
    "Wall time of one model request (streamed to the end), by model.",
    ["model"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "corral_model_tokens",
    "Tokens by model and kind (input, output, cache_read, cache_write).",
    ["model", "kind"],
    registry=REGISTRY,
)
TOOL_CALLS = Counter(
    "corral_tool_calls",
    "Tool calls answered by the brain, by tool (built-in name, or `mcp`) and outcome "
    "(ok, error, denied).",
    ["tool", "outcome"],
    registry=REGISTRY,
)
SANDBOX_PROVISIONS = Counter(
    "corral_sandbox_provisions",
    "Sandboxes provisioned by this process, by outcome (ok, error).",
    ["outcome"],
    registry=REGISTRY,
)
SANDBOX_PROVISION_LATENCY = Histogram(
    "corral_sandbox_provision_duration_seconds",
    "Time to make a sandbox (recipe, repository clones, start).",
    buckets=_SECONDS,
    registry=REGISTRY,
)
SANDBOX_DEATHS = Counter(
    "corral_sandbox_deaths",
    "Sandboxes found dead or failed under a call, by reason (the hands' error code).",
    ["reason"],
    registry=REGISTRY,
)
LEASE_TAKEOVERS = Counter(
    "corral_lease_takeovers",
    "Sessions this process's brains claimed from an expired lease of another brain.",
    registry=REGISTRY,
)
SSE_CLIENTS = Gauge(
    "corral_sse_clients", "Event streams open on this process right now.", registry=REGISTRY
)
BRAIN_MEMO_BYTES = Gauge(
    "corral_brain_memo_bytes",
    "Estimated bytes of folded session state the brains keep between turns "
    "(bounded by brain_memo_mib).",
    registry=REGISTRY,
)
BRAIN_MEMO_SESSIONS = Gauge(
    "corral_brain_memo_sessions",
    "Sessions whose folded state the brains keep between turns.",
    registry=REGISTRY,
)
APPEND_LATENCY = Histogram(
    "corral_append_duration_seconds",
    "Time to append events to a session's log, by writer (brain, api).",
    ["writer"],
    buckets=_FAST,
    registry=REGISTRY,
)


def _add_process_collectors() -> None:
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        REGISTRY.register(collector)


_add_process_collectors()


class _Snapshot(Collector):
    """State read from the store for one scrape."""

    def __init__(self, sessions: Mapping[str, int], queue: Mapping[str, int]) -> None:
        self.sessions = sessions
        self.queue = queue

    def collect(self) -> list[GaugeMetricFamily]:
        sessions = GaugeMetricFamily(
            "corral_sessions", "Sessions in the store by status.", labels=["status"]
        )
        for status in sorted(set(self.sessions) | {"idle", "running", "rescheduling"}):
            sessions.add_metric([status], self.sessions.get(status, 0))
        queue = GaugeMetricFamily(
            "corral_work_queue",
            "Sessions in the wake queue by state (pending, leased, expired).",
            labels=["state"],
        )
        for state, count in sorted(self.queue.items()):
            queue.add_metric([state], count)
        return [sessions, queue]


def render(sessions: Mapping[str, int], queue: Mapping[str, int]) -> bytes:
    """The text exposition: this process's metrics, then the store's state gauges."""
    snapshot = CollectorRegistry(auto_describe=False)
    snapshot.register(_Snapshot(sessions, queue))
    return generate_latest(REGISTRY) + generate_latest(snapshot)
