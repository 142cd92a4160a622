"""A command cannot reach the host <-> agent protocol: forged frames change no tool result."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.hands._agent.wire import MAX_BODY_BYTES, encode_response
from corral.hands._channel import Channel, ProtocolError
from corral.hands.local import LocalHands, LocalSandbox
from tests.hands.conftest import make_recipe, needs_bwrap

pytestmark = [pytest.mark.anyio]

# Finds the agent by its command line (pid 1, bwrap, has it as arguments), then tries every fd
# of it and of the namespace's init (which holds the agent's original stdio) with frames in the
# old and the new header format.
FORGER = r"""
import json, os
FORGED = b"FORGED-RESULT"
frames = [b"0 text - %d\n" % len(FORGED) + FORGED,
          b"0123456789abcdef 0 text - %d\n" % len(FORGED) + FORGED]
def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
def is_agent(pid):
    argv = cmdline(pid).split(b"\0")
    return b"python" in argv[0] and b"_agent.main" in argv[-2]
agent = next(p for p in os.listdir("/proc") if p.isdigit() and is_agent(p))
report = {"agent": agent, "opened": [], "refused": 0}
for pid in (agent, "1"):
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        fds = [str(n) for n in range(16)]
    for fd in fds:
        for mode in (os.O_WRONLY, os.O_RDONLY):
            try:
                opened = os.open(f"/proc/{pid}/fd/{fd}", mode | os.O_NONBLOCK)
            except OSError:
                report["refused"] += 1
                continue
            report["opened"].append(f"{pid}/{fd}/{'w' if mode else 'r'}")
            if mode == os.O_WRONLY:
                for frame in frames:
                    try:
                        os.write(opened, frame)
                    except OSError:
                        pass
            os.close(opened)
print("forger finished " + json.dumps(report))
"""


async def bash(sandbox: LocalSandbox, command: str) -> tuple[str, bool]:
    out = await sandbox.execute("bash", {"command": command})
    return out.content[0]["text"], out.is_error


@pytest.mark.bwrap
@needs_bwrap
async def test_forged_frames_change_no_result(local_hands: LocalHands, tmp_path: Path) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    (tmp_path / "s1" / "workspace" / "forge.py").write_text(FORGER)
    text, err = await bash(sandbox, "python3 forge.py")
    assert not err and text.startswith("forger finished "), text
    report = json.loads(text.removeprefix("forger finished "))
    agent_fds = [o for o in report["opened"] if o.startswith(report["agent"] + "/")]
    assert agent_fds == [], "a command opened the agent's descriptors through /proc"
    for command, expected in [("echo next", "next"), ("echo after", "after")]:
        assert await bash(sandbox, command) == (expected, False)
    out = await sandbox.execute("read", {"file_path": "forge.py"})
    assert out.content[0]["text"] == FORGER


@pytest.mark.bwrap
@needs_bwrap
async def test_the_agent_cannot_be_read_through_proc(
    local_hands: LocalHands, tmp_path: Path
) -> None:
    sandbox = await local_hands.provision(make_recipe(tmp_path))
    probe = (
        "for p in /proc/[0-9]*; do case $(tr '\\0' ' ' <$p/cmdline) in "
        "bwrap*) ;; *_agent.main*) a=$p;; esac; done; "
        "for f in mem environ fd/0 fd/1 fd/2 fd/3; do "
        ": 2>/dev/null <$a/$f && echo opened $f; done; echo probed ${a:+agent}"
    )
    assert await bash(sandbox, probe) == ("probed agent", False)


@pytest.fixture
def pair() -> Iterator[tuple[Channel, socket.socket]]:
    """A host Channel and the agent's end of its socket."""
    host, agent = socket.socketpair()
    channel = Channel(host)
    yield channel, agent
    channel.close()
    agent.close()


async def test_the_host_reads_only_the_answer_to_its_request(
    pair: tuple[Channel, socket.socket],
) -> None:
    channel, agent = pair
    agent.sendall(encode_response("aa01", "text", b"one") + encode_response("aa02", "text", b"2"))
    frame = await channel.read_frame("aa01")
    assert (frame.kind, frame.body, frame.is_error) == ("text", b"one", False)
    with pytest.raises(ProtocolError, match="'aa02' while 'aa03' was pending"):
        await channel.read_frame("aa03")


@pytest.mark.parametrize(
    "data",
    [
        b"aa01 0 text - 5" + b" " * 300 + b"\n",  # header longer than 256 bytes
        b"aa01 0 text - %d\n" % (MAX_BODY_BYTES["text"] + 1),
        b"aa01 0 image image/png %d\n" % (MAX_BODY_BYTES["image"] + 1),
        b"aa01 0 document application/pdf 99999999999999\n",
        b"aa01 0 text - 1\xff\n",
    ],
)
async def test_the_host_refuses_oversized_or_malformed_headers(
    pair: tuple[Channel, socket.socket], data: bytes
) -> None:
    channel, agent = pair
    agent.sendall(data)
    with pytest.raises(ProtocolError):
        await channel.read_frame("aa01")


async def test_a_frame_cut_short_is_end_of_input(pair: tuple[Channel, socket.socket]) -> None:
    channel, agent = pair
    agent.sendall(encode_response("aa01", "text", b"complete body")[:-3])
    agent.shutdown(socket.SHUT_WR)
    with pytest.raises(EOFError):
        await channel.read_frame("aa01")
