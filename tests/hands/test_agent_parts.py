"""Pieces of the in-sandbox agent that need no sandbox: framing, output cap, path views."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.hands._agent import filetools
from corral.hands._agent.main import Reply
from corral.hands._agent.shell import OutputBuffer
from corral.hands._agent.wire import (
    MAX_BODY_BYTES,
    MAX_TEXT_BYTES,
    FrameReader,
    encode_request,
    encode_response,
    parse_response_header,
)


def test_request_frames_round_trip(tmp_path: Path) -> None:
    import os

    r, w = os.pipe()
    request = {"tool": "bash", "input": {"command": "echo ü", "n": [1, 2.5, None]}, "timeout": 3.0}
    os.write(w, encode_request(request) + encode_request({"x": 1}))
    os.close(w)
    reader = FrameReader(r)
    assert reader.read_request() == request
    assert reader.read_request() == {"x": 1}
    assert reader.read_request() is None
    os.close(r)


def test_response_headers() -> None:
    frame = encode_response("ab12", "image", b"\x89PNG", is_error=False, media="image/png")
    header, body = frame.split(b"\n", 1)
    assert parse_response_header(header) == ("ab12", "image", "image/png", False, 4)
    assert body == b"\x89PNG"
    too_big = MAX_BODY_BYTES["text"] + 1
    for bad in (
        b"",
        b"0 text - 1",  # no id
        b"ab12 0 text - -1",
        b"ab12 0 pickle - 1",
        b"ab12 7 text - 1",
        b"AB12 0 text - 1",
        b"%s 0 text - 1" % (b"a" * 65),
        b"ab12 0 text - %d" % too_big,
        b"ab12 0 ready - 65",
    ):
        with pytest.raises(ValueError):
            parse_response_header(bad)


def test_agent_truncates_text_the_host_would_refuse() -> None:
    reply = Reply.text("x" * (MAX_TEXT_BYTES + 10))
    assert len(reply.body) == MAX_TEXT_BYTES and reply.body.endswith(b"bytes]")


def test_output_buffer_keeps_head_and_tail() -> None:
    buf = OutputBuffer(100)
    buf.add(b"H" * 40)
    for _ in range(1000):
        buf.add(b"x" * 37)
    buf.add(b"TAIL")
    text = buf.text()
    assert text.startswith("H" * 40 + "x" * 10 + "\n[output truncated: 36944 bytes omitted]\n")
    assert text.endswith("TAIL") and len(text) < 150


def test_view_maps_sandbox_paths(tmp_path: Path) -> None:
    ws, ro = tmp_path / "ws", tmp_path / "ro"
    ws.mkdir()
    ro.mkdir()
    (ro / "r.txt").write_text("ro")
    view = filetools.View(
        "/workspace", [("/workspace", str(ws), False), ("/mnt/ro", str(ro), True)], strict=True
    )
    assert filetools.write(view, "a/b.txt", "hi") == "wrote 2 bytes to a/b.txt"
    assert (ws / "a" / "b.txt").read_text() == "hi"
    assert filetools.read(view, "/mnt/ro/r.txt") == "ro"
    assert filetools.glob(view, "**/*.txt") == "/workspace/a/b.txt"
    assert filetools.grep(view, "r", "/mnt/ro") == "/mnt/ro/r.txt:1:ro"
    with pytest.raises(filetools.ToolFailure, match="inside read-only directory /mnt/ro"):
        filetools.edit(view, "/mnt/ro/r.txt", "ro", "rw")
    with pytest.raises(filetools.ToolFailure, match="outside the sandbox"):
        filetools.read(view, "/etc/passwd")
    with pytest.raises(filetools.ToolFailure, match="'..' is not permitted"):
        filetools.glob(view, "../*")


def test_write_counts_utf8_bytes(tmp_path: Path) -> None:
    view = filetools.View(str(tmp_path))
    assert filetools.write(view, "u.txt", "héllo") == "wrote 6 bytes to u.txt"
    assert filetools.read(view, "u.txt", [1, 0]) == "héllo"
    assert filetools.read(view, "u.txt", [5, 9]) == "(no lines in range)"


@pytest.mark.parametrize(
    ("tool_input", "message"),
    [
        ({"file_path": 3}, "file_path must be a non-empty string"),
        ({"file_path": "x", "view_range": [1]}, "view_range must be [start_line, end_line]"),
        ({"file_path": "x", "view_range": "1-2"}, "view_range must be"),
    ],
)
def test_read_input_validation(tmp_path: Path, tool_input: dict[str, object], message: str) -> None:
    with pytest.raises(filetools.ToolFailure, match=message.replace("[", r"\[")):
        filetools.run(filetools.View(str(tmp_path)), "read", tool_input)


def test_grep_skips_binary_and_long_lines(tmp_path: Path) -> None:
    (tmp_path / "bin").write_bytes(b"needle\x00")
    (tmp_path / "long.txt").write_text("needle" + "x" * 3000 + "\nneedle short\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "c").write_text("needle")
    assert (
        filetools.grep(filetools.View(str(tmp_path)), "needle")
        == f"{tmp_path}/long.txt:2:needle short"
    )
