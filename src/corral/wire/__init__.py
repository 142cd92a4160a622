"""Managed Agents wire schema for requests (pydantic v2); imports nothing from corral."""
