"""Shared fixtures for the demo tests: one generated data set per session (it takes ~0.4 s)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.demo.data import generate


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("demo-data")).root
