"""The harness: a stateless loop woken by session id; everything it knows comes from the log."""
