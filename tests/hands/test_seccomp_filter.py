"""The seccomp program, run through a small classic-BPF interpreter (no kernel needed)."""

from __future__ import annotations

import struct

import pytest

from corral.hands._seccomp import SeccompUnsupported, build_filter

ALLOW, KILL = 0x7FFF0000, 0x80000000
EPERM, ENOSYS = 0x00050000 | 1, 0x00050000 | 38
X86_64, AARCH64 = 0xC000003E, 0xC00000B7


def run_bpf(program: bytes, *, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Evaluate the filter on one `struct seccomp_data` (only the opcodes the builder emits)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    ops = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        pc += 1
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x06:  # ret k
            return k
        elif code in (0x15, 0x35, 0x45):  # jeq / jge / jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize(
    ("nr", "args", "verdict"),
    [
        (0, (), ALLOW),  # read
        (59, (), ALLOW),  # execve
        (101, (), EPERM),  # ptrace
        (165, (), EPERM),  # mount
        (272, (), EPERM),  # unshare
        (308, (), EPERM),  # setns
        (321, (), EPERM),  # bpf
        (425, (), EPERM),  # io_uring_setup
        (435, (), ENOSYS),  # clone3
        (56, (0x01200011,), ALLOW),  # clone as fork() does
        (56, (0x003D0F00,), ALLOW),  # clone as pthread_create does
        (56, (0x10000000,), EPERM),  # clone(CLONE_NEWUSER)
        (56, (0x20000000 | 0x11,), EPERM),  # clone(CLONE_NEWPID)
        (16, (1, 0x5412), EPERM),  # ioctl TIOCSTI
        (16, (1, 0x1_0000_5412), EPERM),  # ...also with junk in the ignored high half
        (16, (1, 0x5401), ALLOW),  # ioctl TCGETS
        (135, (0xFFFFFFFF,), ALLOW),  # personality query
        (135, (0x0040000,), EPERM),  # personality(ADDR_NO_RANDOMIZE)
        (0x40000000 + 1, (), KILL),  # x32 ABI
    ],
)
def test_x86_64_verdicts(nr: int, args: tuple[int, ...], verdict: int) -> None:
    assert run_bpf(build_filter("x86_64"), arch=X86_64, nr=nr, args=args) == verdict


def test_foreign_architecture_is_killed() -> None:
    assert run_bpf(build_filter("x86_64"), arch=0x40000003, nr=0) == KILL  # i386
    assert run_bpf(build_filter("aarch64"), arch=X86_64, nr=0) == KILL


def test_aarch64_verdicts() -> None:
    program = build_filter("aarch64")
    assert run_bpf(program, arch=AARCH64, nr=117) == EPERM  # ptrace
    assert run_bpf(program, arch=AARCH64, nr=63) == ALLOW  # read
    assert run_bpf(program, arch=AARCH64, nr=220, args=(0x10000000,)) == EPERM


def test_unknown_architecture() -> None:
    with pytest.raises(SeccompUnsupported):
        build_filter("sparc64")
