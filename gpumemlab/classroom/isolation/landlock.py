"""An allow-list of folders for an unprivileged run, enforced by the kernel (Linux Landlock).

Without the sandbox's mount namespace, a submission running as a uid of its own can still read
every world-readable file of the machine: another checkout of gpumemlab, a course repository
with its solutions. ``restricted(inner, read_only, read_write)`` starts ``inner`` through a
small launcher that, already as that uid and with no_new_privs (``setpriv --no-new-privs``),
creates a Landlock ruleset (``landlock_create_ruleset``), allows the given folders
(``landlock_add_rule``, ``LANDLOCK_RULE_PATH_BENEATH``) and restricts itself
(``landlock_restrict_self``) before it execs ``inner``; the restriction is inherited by every
process the run starts. The file-system rights of Landlock ABI 1 are handled (with REFER from
ABI 2 and TRUNCATE from ABI 3 where the kernel has them). Neither ``/tmp`` nor ``/var/tmp`` is
on the list: a run's temporary files go to its own folder. Where the kernel has no Landlock,
the launcher says so on stderr and runs ``inner`` as before (the uid's other bounds stay).
"""
from __future__ import annotations

import json
import os
import sys

# The launcher runs as the run's uid before anything of the submission: the standard library
# only, no file of the kit.
_LAUNCHER = r"""
import ctypes, json, os, struct, sys
ro, rw = json.loads(sys.argv[1]), json.loads(sys.argv[2])
inner = sys.argv[4:]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CREATE, ADD, RESTRICT = 444, 445, 446          # the same on x86_64 and aarch64
abi = libc.syscall(CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
if abi < 1:
    sys.stderr.write("gpumemlab: no Landlock in this kernel: the run's files are not "
                     "restricted to its allow-list\n")
    os.execv(inner[0], inner)
READ = (1 << 0) | (1 << 2) | (1 << 3)          # EXECUTE, READ_FILE, READ_DIR
ALL = (1 << 13) - 1                            # every ABI 1 file-system right
if abi >= 2:
    ALL |= 1 << 13                             # REFER
if abi >= 3:
    ALL |= 1 << 14                             # TRUNCATE
attr = ctypes.create_string_buffer(struct.pack("=Q", ALL))
fd = libc.syscall(CREATE, attr, ctypes.c_size_t(8), ctypes.c_uint32(0))
if fd < 0:
    sys.exit(f"gpumemlab: landlock_create_ruleset failed: {os.strerror(ctypes.get_errno())}")
for paths, rights in ((ro, READ), (rw, ALL)):
    for path in paths:
        try:
            parent = os.open(path, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)
        except OSError:
            continue                           # a folder this machine does not have
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights, parent))
        if libc.syscall(ADD, ctypes.c_int(fd), ctypes.c_int(1), rule, ctypes.c_uint32(0)) < 0:
            sys.exit(f"gpumemlab: landlock_add_rule {path}: {os.strerror(ctypes.get_errno())}")
        os.close(parent)
if libc.syscall(RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) < 0:
    sys.exit(f"gpumemlab: landlock_restrict_self failed: {os.strerror(ctypes.get_errno())}")
os.close(fd)
os.execv(inner[0], inner)
"""

# What any Python program and its kernel read: the system's folders.
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc",
               "/sys", "/run")
# What they write: /dev (/dev/null, a terminal; /dev/shm, where POSIX semaphores and shared
# memory live). Not /tmp or /var/tmp: the grader's files and other runs' are there, and each
# run has a temporary folder of its own (``unprivileged.private_env``: TMPDIR, the Jupyter
# runtime folder), which the caller passes among the folders to write.
SYSTEM_WRITE = ("/dev",)


def abi() -> int:
    """The kernel's Landlock ABI version (0 where it has none): the launcher's first question."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def interpreter_folders() -> list:
    """The running interpreter's own folders (a venv's, and the Python it was made from)."""
    out = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
           os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(out)


def restricted(inner: list, read_only, read_write) -> list:
    """``inner`` started under an allow-list: read (and execute) below ``read_only`` and the
    system's and interpreter's folders, read and write below ``read_write``, nothing else."""
    ro = sorted({*SYSTEM_READ, *interpreter_folders(), *map(str, read_only)})
    rw = sorted({*SYSTEM_WRITE, *map(str, read_write)})
    return [sys.executable, "-S", "-c", _LAUNCHER, json.dumps(ro), json.dumps(rw), "--",
            *inner]
