"""Images for the deployment tests, built once per run from a clean, private podman storage.

Skipped unless `CORRAL_TEST_DEPLOY=1` (CI sets it; the run takes minutes and needs root).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.podman import BASE_IMAGE, Podman, ensure_tools

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
ENABLED = os.environ.get("CORRAL_TEST_DEPLOY") == "1"
REPORTS: list[str] = []
"""Timed phases of this run, printed in pytest's summary."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here is a `deploy` test, skipped unless asked for and run as root."""
    for item in items:
        if Path(str(item.fspath)).parent != HERE:
            continue
        item.add_marker(pytest.mark.deploy)
        if not ENABLED:
            item.add_marker(pytest.mark.skip(reason="set CORRAL_TEST_DEPLOY=1 to build images"))
        elif os.geteuid() != 0:
            item.add_marker(pytest.mark.skip(reason="rootful podman: run as root"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How long each phase took (the build dominates; CI time is budgeted)."""
    for report in REPORTS:
        terminalreporter.write_sep("-", "deploy test phases")
        terminalreporter.write_line(report)


@dataclass(frozen=True)
class Images:
    """Local tags of the images under test."""

    corral: str
    postgres: str


@pytest.fixture(scope="session")
def podman(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Podman]:
    """Podman with its own configuration and storage; everything is removed afterwards."""
    ensure_tools()
    pod = Podman(tmp_path_factory.mktemp("podman"))
    try:
        yield pod
    finally:
        with pod.phase("teardown: podman reset"):
            pod.reset()
        REPORTS.append(pod.report())


@pytest.fixture(scope="session")
def images(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Images:
    """The Corral image (deploy/Containerfile) and the test's PostgreSQL image, built side by
    side from the Debian base with `--pull=never`."""
    with podman.phase("base image (cache + import)"):
        podman.import_base()
    tags = Images(corral="localhost/corral:test", postgres="localhost/corral-test-postgres:15")
    logs = tmp_path_factory.mktemp("build")
    base = ["--build-arg", f"BASE={BASE_IMAGE}"]
    # The CA bundle of the TLS-inspecting proxy, if any, as a secret: never in a layer.
    ca = os.environ.get("SSL_CERT_FILE") or os.environ.get("PIP_CERT")
    secret = ["--secret", f"id=ca,src={ca}"] if ca and Path(ca).is_file() else []
    with podman.phase("build images (parallel)"):
        corral = podman.build(
            *base, *secret, "-f", str(ROOT / "deploy" / "Containerfile"), "-t", tags.corral,
            str(ROOT), log=logs / "corral.log",
        )  # fmt: skip
        postgres = podman.build(
            *base, "-f", str(HERE / "postgres.Containerfile"), "-t", tags.postgres, str(HERE),
            log=logs / "postgres.log",
        )  # fmt: skip
        for proc, name in ((corral, "corral"), (postgres, "postgres")):
            if proc.wait(timeout=900) != 0:
                tail = (logs / f"{name}.log").read_text(errors="replace")[-4000:]
                raise AssertionError(f"building the {name} image failed:\n{tail}")
    return tags
