"""A classic-BPF seccomp filter for bwrap `--seccomp FD`, assembled in pure Python.

Denies (EPERM) syscalls a sandbox never needs, kills foreign-arch calls; never loosens anything.
"""

from __future__ import annotations

import errno
import platform
import struct
from functools import cache

# Opcodes (linux/bpf_common.h) and return actions (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000

_OFF_NR = 0
_OFF_ARCH = 4
_OFF_ARG0_LO = 16
_OFF_ARG1_LO = 24

_X32_SYSCALL_BIT = 0x40000000
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
_CLONE_NS_FLAGS |= 0x40000000
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
# PER_LINUX, PER_LINUX32, UNAME26|PER_LINUX, and the 0xffffffff "query" value (Docker's list).
_PERSONALITY_ALLOWED = (0x0, 0x8, 0x20008, 0xFFFFFFFF)

_DENIED = [
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "process_madvise",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "open_by_handle_at",
    "name_to_handle_at",
    "fanotify_init",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "vhangup",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "iopl",
    "ioperm",
    "uselib",
    "_sysctl",
    "nfsservctl",
]


class SeccompUnsupported(RuntimeError):
    """The host architecture has no syscall table here."""


# name -> number; a name missing from an arch's table does not exist there.
_X86_64: dict[str, int] = {
    "ioctl": 16, "clone": 56, "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135,
    "vhangup": 153, "pivot_root": 155, "_sysctl": 156, "adjtimex": 159, "acct": 163,
    "settimeofday": 164, "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168,
    "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176,
    "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212, "clock_settime": 227,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "kexec_file_load": 320,
    "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
    "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
}  # fmt: skip

_AARCH64: dict[str, int] = {
    "lookup_dcookie": 18, "ioctl": 29, "umount2": 39, "mount": 40, "pivot_root": 41,
    "vhangup": 58, "quotactl": 60, "acct": 89, "personality": 92, "unshare": 97,
    "kexec_load": 104, "init_module": 105, "delete_module": 106, "clock_settime": 112,
    "syslog": 116, "ptrace": 117, "reboot": 142, "settimeofday": 170, "adjtimex": 171,
    "add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220, "swapon": 224,
    "swapoff": 225, "perf_event_open": 241, "fanotify_init": 262, "name_to_handle_at": 264,
    "open_by_handle_at": 265, "clock_adjtime": 266, "setns": 268, "process_vm_readv": 270,
    "process_vm_writev": 271, "kcmp": 272, "finit_module": 273, "bpf": 280, "userfaultfd": 282,
    "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
    "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
}  # fmt: skip

# machine -> (AUDIT_ARCH_*, syscall table, has the x32 ABI)
_ARCHES: dict[str, tuple[int, dict[str, int], bool]] = {
    "x86_64": (0xC000003E, _X86_64, True),
    "aarch64": (0xC00000B7, _AARCH64, False),
}


class _Asm:
    """Forward-only jumps to labels, resolved at the end (BPF forbids backward jumps)."""

    def __init__(self) -> None:
        self.ops: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: str | int = 0, jf: str | int = 0) -> None:
        self.ops.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.ops)

    def assemble(self) -> bytes:
        out = bytearray()
        for pc, (code, jt, jf, k) in enumerate(self.ops):
            out += struct.pack("<HBBI", code, self._rel(pc, jt), self._rel(pc, jf), k)
        return bytes(out)

    def _rel(self, pc: int, target: str | int) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - pc - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"seccomp jump to {target} out of range ({offset})")
        return offset


def _emit_arg_block(
    asm: _Asm, name: str, offset: int, values: tuple[int, ...], *, deny: bool
) -> None:
    """Emit block `name`: one 32-bit argument matched against `values` (deny or allow list).

    Only the low 32 bits are compared on purpose: the kernel truncates these arguments to
    `unsigned int`, so checking the high half too would let `value | 1 << 32` slip through.
    """
    hit, miss = (
        (_RET_ERRNO | errno.EPERM, _RET_ALLOW) if deny else (_RET_ALLOW, _RET_ERRNO | errno.EPERM)
    )
    asm.label(name)
    asm.op(_LD_W_ABS, offset)
    for i, value in enumerate(values):
        asm.op(_JEQ_K, value, jt=len(values) - i)  # to the `hit` return below
    asm.op(_RET_K, miss)
    asm.op(_RET_K, hit)


@cache
def build_filter(machine: str | None = None) -> bytes:
    """The filter program for `machine` (default: this host) as `struct sock_filter[]` bytes.

    Raises:
        SeccompUnsupported: no syscall table for this architecture.
    """
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise SeccompUnsupported(f"no seccomp syscall table for architecture {machine!r}")
    audit_arch, table, has_x32 = _ARCHES[machine]
    asm = _Asm()
    asm.op(_LD_W_ABS, _OFF_ARCH)
    asm.op(_JEQ_K, audit_arch, jf="kill")
    asm.op(_LD_W_ABS, _OFF_NR)
    if has_x32:
        asm.op(_JGE_K, _X32_SYSCALL_BIT, jt="kill")
    asm.op(_JEQ_K, table["clone"], jt="clone")
    asm.op(_JEQ_K, table["clone3"], jt="enosys")
    asm.op(_JEQ_K, table["ioctl"], jt="ioctl")
    asm.op(_JEQ_K, table["personality"], jt="personality")
    for name in _DENIED:
        if name in table:
            asm.op(_JEQ_K, table[name], jt="eperm")
    asm.label("allow")
    asm.op(_RET_K, _RET_ALLOW)
    asm.label("eperm")
    asm.op(_RET_K, _RET_ERRNO | errno.EPERM)
    # glibc falls back to clone(2) on ENOSYS; clone3's flags live in memory BPF cannot read.
    asm.label("enosys")
    asm.op(_RET_K, _RET_ERRNO | errno.ENOSYS)
    asm.label("kill")
    asm.op(_RET_K, _RET_KILL_PROCESS)
    asm.label("clone")
    asm.op(_LD_W_ABS, _OFF_ARG0_LO)
    asm.op(_JSET_K, _CLONE_NS_FLAGS, jt=1)
    asm.op(_RET_K, _RET_ALLOW)
    asm.op(_RET_K, _RET_ERRNO | errno.EPERM)
    _emit_arg_block(asm, "ioctl", _OFF_ARG1_LO, (_TIOCSTI, _TIOCLINUX), deny=True)
    _emit_arg_block(asm, "personality", _OFF_ARG0_LO, _PERSONALITY_ALLOWED, deny=False)
    return asm.assemble()
