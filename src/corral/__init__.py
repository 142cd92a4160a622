"""Corral: a self-hosted runtime for long-running agents that speaks the Managed Agents API."""

__version__ = "0.1.0"
