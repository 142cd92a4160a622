"""The session: a durable, append-only event log per session, plus its wake queue.

Knows nothing of models, sandboxes or HTTP.
"""
