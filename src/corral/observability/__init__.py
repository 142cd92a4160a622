"""Metrics, traces and structured logs: a leaf every layer may report to; imports no corral."""
