"""`corral hands`: Corral's own worker for `self_hosted` environments (docs/self_hosted.md).

It speaks only the public HTTP API (the official SDK as its client): it polls its
environment's work queue with an environment key, and serves each item's session with the
item's sessions token, running the session's built-in tool calls in the same bubblewrap
sandboxes (`corral.hands`) as cloud environments. It never touches a store.
"""
