"""System V shared-memory segments a run left behind, removed at its end (the unprivileged mode).

Without the sandbox a run has no IPC namespace of its own and no seccomp filter refusing
``shmget``: a segment it makes outlives every process of it (``IPC_RMID`` never called), holds
its memory until someone removes it, and no rlimit counts it. Linux lists every segment in
``/proc/sysvipc/shm`` (``ipc/shm.c``'s ``sysvipc_shm_proc_show``: key, shmid, perms, size,
cpid, lpid, nattch, uid, gid, cuid, cgid, ...); the grader, root, removes those the run's uid
owns or created with ``shmctl(shmid, IPC_RMID)`` (libc), once every process of the uid is dead.
"""
from __future__ import annotations

import ctypes

IPC_RMID = 0   # linux/ipc.h
TABLE = "/proc/sysvipc/shm"


def segments_of(uid: int, table: str = TABLE) -> list:
    """The shmids of the segments whose owner or creator is ``uid``."""
    try:
        with open(table, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    head = lines[0].split() if lines else []
    found = []
    for line in lines[1:]:
        row = dict(zip(head, line.split()))
        try:
            if uid in (int(row["uid"]), int(row["cuid"])):
                found.append(int(row["shmid"]))
        except (KeyError, ValueError):
            continue
    return found


def remove_segments(uid: int) -> int:
    """Remove every segment of ``uid`` (``segments_of``). -> how many were removed."""
    libc = ctypes.CDLL(None, use_errno=True)
    removed = 0
    for shmid in segments_of(uid):
        if libc.shmctl(ctypes.c_int(shmid), ctypes.c_int(IPC_RMID), None) == 0:
            removed += 1
    return removed
