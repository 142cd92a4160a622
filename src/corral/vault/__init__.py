"""Vault: sealed credential secrets, their keys, and the seam others resolve secrets through."""
