"""Sandbox uids outside the server's user namespace are refused at start, naming the setting
(a rootless container maps 0-65535; the default range lies far above it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.config import load_settings
from corral.errors import StartupError
from corral.hands._uids import UidRange, covered, mapped_ranges
from corral.preflight import check_sandbox_uids

HOST = "         0          0 4294967295\n"
CONTAINER = "         0     100000      65536\n"
SPLIT = "0 100000 1000\n1000 1000 1\n1001 101001 64535\n"


@pytest.mark.parametrize(
    ("id_map", "wanted", "expected"),
    [
        (HOST, (1_879_048_192, 1_879_113_727), True),
        (CONTAINER, (1_879_048_192, 1_879_113_727), False),
        (CONTAINER, (20_000, 59_999), True),
        (SPLIT, (66_000, 70_000), False),  # past the end
        (SPLIT, (500, 2_000), True),  # three ranges that touch make one
        ("0 100000 1000\n2000 102000 10\n", (500, 1_500), False),  # a hole
        ("", (1, 2), False),
    ],
)
def test_covered(id_map: str, wanted: tuple[int, int], expected: bool) -> None:
    assert covered(UidRange(*wanted), mapped_ranges(id_map)) is expected


@pytest.mark.skipif(os.geteuid() != 0, reason="the range is used only when the server is root")
def test_an_unmapped_range_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    uid_map, gid_map = tmp_path / "uid_map", tmp_path / "gid_map"
    uid_map.write_text(CONTAINER)
    gid_map.write_text(HOST)
    settings = load_settings(environ={"CORRAL_DATA_DIR": str(tmp_path)})
    with pytest.raises(StartupError) as caught:
        check_sandbox_uids(settings, (uid_map, gid_map))
    message = str(caught.value)
    assert "sandbox_uid_range" in message and "CORRAL_SANDBOX_UID_RANGE" in message
    assert "0-65535" in message and "\n" not in message
    fits = load_settings(
        environ={"CORRAL_DATA_DIR": str(tmp_path), "CORRAL_SANDBOX_UID_RANGE": "20000-59999"}
    )
    check_sandbox_uids(fits, (uid_map, gid_map))
    check_sandbox_uids(settings)  # this machine's own maps hold the default
