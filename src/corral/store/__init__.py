"""Persistence: one `Store` contract (event log, wake queue, resources), two backends."""
