"""Memory a sandbox could hold outside its address-space limit, and how the grader bounds it.

``RLIMIT_AS`` counts what a process maps, not memory that outlives a mapping: pages of a
``memfd_create`` file or of a System V shared-memory segment stay allocated after they are
unmapped, belong to no process the OOM killer can pick, and are counted by no rlimit; files in
a tmpfs are memory too. Two ways to bound them, chosen per machine (``plan``):

* **cgroup v2** (``CgroupV2``): where the grader's own cgroup is on a cgroup2 file system, is
  writable and delegates the ``memory`` and ``pids`` controllers to its children, each sandbox
  runs in a child cgroup with ``memory.max`` (which charges anonymous memory, shmem, memfd and
  tmpfs pages alike), ``memory.swap.max`` 0 and ``pids.max``;
* otherwise, a **seccomp filter** handed to bwrap (``--seccomp FD``) makes ``memfd_create``,
  ``memfd_secret`` and ``shmget`` (and i386's ``ipc``) fail with EPERM, and every tmpfs of the
  sandbox is sized from the memory limit (``tmpfs_bytes``), so that what one sandbox can hold is
  at most its address-space limit plus those sizes.

The filter is a classic BPF program (``struct sock_filter`` records, as ``linux/filter.h`` and
``linux/seccomp.h`` define them) built here; it checks the architecture first, so a syscall
number is never read under the wrong table, and kills a process calling under a table it does not
list; on a machine whose own table it does not list it is not built (``UnknownArchitecture``).
"""
from __future__ import annotations

import os
import secrets
import struct
from pathlib import Path

# BPF opcodes (linux/bpf_common.h)
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_RET_ALLOW, _RET_EPERM = 0x7FFF0000, 0x00050000 | 1   # SECCOMP_RET_ALLOW, RET_ERRNO | EPERM
_RET_KILL_PROCESS = 0x80000000                          # SECCOMP_RET_KILL_PROCESS
_X32 = 0x40000000
# AUDIT_ARCH_* -> syscall numbers denied: memfd_create, memfd_secret, shmget (+ i386's ipc)
DENIED = {
    0xC000003E: (319, 447, 29, _X32 | 319, _X32 | 29),   # x86_64 (and its x32 ABI)
    0x40000003: (356, 447, 395, 117),                    # i386
    0xC00000B7: (279, 447, 194),                         # aarch64
}
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _insn(code, jt, jf, k) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


class UnknownArchitecture(RuntimeError):
    """The machine's syscall table is not one the filter knows: it cannot deny anything there."""


def seccomp_program(denied=None, machine=None) -> bytes:
    """The filter: for a known architecture, EPERM for its denied numbers; a syscall made under
    any other architecture's table kills the process (SECCOMP_RET_KILL_PROCESS), so no ABI the
    filter does not list (32-bit ARM on an aarch64 kernel, say) slips past the bound.

    Raises UnknownArchitecture where this machine (``os.uname().machine`` unless ``machine`` is
    given) is none of DENIED's: there every syscall would be killed, or, before, allowed."""
    denied = DENIED if denied is None else denied
    machine = os.uname().machine if machine is None else machine
    # uname's names for DENIED's AUDIT_ARCH_* values
    arch_of = {"x86_64": 0xC000003E, "amd64": 0xC000003E, "i386": 0x40000003, "i486": 0x40000003,
               "i586": 0x40000003, "i686": 0x40000003, "aarch64": 0xC00000B7, "arm64": 0xC00000B7}
    if arch_of.get(machine) not in denied:
        raise UnknownArchitecture(
            f"the sandbox's seccomp filter knows the memfd/shmget syscall numbers of x86_64, i386 "
            f"and aarch64 only, not of this machine ({machine}): grading here cannot bound memory "
            f"held outside the address-space limit")
    prog = [_insn(_LD_W_ABS, 0, 0, 4)]                   # seccomp_data.arch
    for arch, numbers in denied.items():
        body = [_insn(_LD_W_ABS, 0, 0, 0)]               # seccomp_data.nr
        k = len(numbers)
        body += [_insn(_JEQ_K, k - i, 0, nr) for i, nr in enumerate(numbers)]
        body += [_insn(_RET_K, 0, 0, _RET_ALLOW), _insn(_RET_K, 0, 0, _RET_EPERM)]
        prog.append(_insn(_JEQ_K, 0, len(body), arch))
        prog += body
    prog.append(_insn(_RET_K, 0, 0, _RET_KILL_PROCESS))   # an architecture not listed
    return b"".join(prog)


def seccomp_fd() -> int:
    """A pipe's read end holding the filter, for ``bwrap --seccomp FD`` (bwrap reads it)."""
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, seccomp_program())   # a few hundred bytes: fits the pipe's buffer
    finally:
        os.close(wfd)
    return rfd


def tmpfs_bytes(memory_bytes: int) -> int:
    """Size of each of the sandbox's /tmp and /dev/shm (the home folder adds its files)."""
    return max(16 << 20, min(256 << 20, int(memory_bytes) // 16))


class CgroupV2:
    """One sandbox's cgroup: made under the grader's own cgroup, removed by ``close``."""

    def __init__(self, parent: Path, memory_bytes: int, processes: int):
        self.path = Path(parent) / f"gml-sandbox-{secrets.token_hex(6)}"
        self.path.mkdir()
        try:
            (self.path / "memory.max").write_text(str(int(memory_bytes)))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
            if processes:
                (self.path / "pids.max").write_text(str(int(processes)))
        except OSError:
            self.close()
            raise

    def wrap(self, argv: list) -> list:
        """``argv`` started inside the cgroup (the shell joins it, then becomes argv)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"',
                str(self.path / "cgroup.procs")] + list(argv)

    def close(self):
        try:
            self.path.rmdir()
        except OSError:
            pass


def delegated_parent(root: Path = CGROUP_ROOT):
    """The grader's cgroup when sandboxes can get cgroups of their own under it, else None."""
    try:
        if not (root / "cgroup.controllers").is_file():
            return None   # not cgroup v2 (a v1 or hybrid hierarchy)
        own = None
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                own = line[3:]
        if own is None:
            return None
        parent = root / own.lstrip("/")
        wanted = {"memory", "pids"}
        if not wanted <= set((parent / "cgroup.subtree_control").read_text().split()):
            return None
        return parent if os.access(parent, os.W_OK) else None
    except OSError:
        return None


def sandbox_cgroup(memory_bytes: int, processes: int):
    """A cgroup v2 of its own for one sandbox where this machine delegates one, else None."""
    parent = delegated_parent()
    if parent is None:
        return None
    try:
        return CgroupV2(parent, memory_bytes, processes)
    except OSError:
        return None


def plan(root: Path = CGROUP_ROOT) -> str:
    """"cgroup v2" or "seccomp": which bound this machine's sandboxes get."""
    return "cgroup v2" if delegated_parent(root) is not None else "seccomp"
