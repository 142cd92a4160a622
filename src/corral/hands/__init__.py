"""Sandboxes ("hands") behind the `Hands` protocol."""
