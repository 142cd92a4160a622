"""A server with short work leases (3 s) for the self-hosted tests, so lost workers are
noticed quickly without long sleeps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.messages_server import FakeModelServer
from tests.server import ServerProcess, backend_env

WORK_TTL = 3


class PatientServer(ServerProcess):
    """Waits longer for /health: these modules start servers, workers and CLIs side by side
    on a small shared machine, where one import can take a minute."""

    def _wait_healthy(self) -> None:
        for _ in range(3):
            try:
                super()._wait_healthy()
                return
            except RuntimeError as exc:
                if "exited early" in str(exc):
                    raise
        super()._wait_healthy()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModelServer, backend: str
) -> Iterator[ServerProcess]:
    """One server per module and backend, with `CORRAL_WORK_TTL_SECONDS=3`."""
    with backend_env(backend) as env:
        proc = PatientServer(
            tmp_path_factory.mktemp("corral"),
            model_url=fake_model.url,
            env={**env, "CORRAL_WORK_TTL_SECONDS": str(WORK_TTL)},
        ).start()
        yield proc
        proc.stop()
