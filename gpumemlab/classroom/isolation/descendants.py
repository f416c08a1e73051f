"""Every process a grader started, however it detached itself, ended before results are written.

A notebook run AS ROOT (Gradescope's ``allow_root_runs``) shares the grader's uid, so the
unprivileged mode's kill-by-uid cannot tell its processes from the grader's; a daemon that forked
twice (its parent exited: the kernel made it the orphan of init) outlived the run and rewrote
``results.json`` after the grader wrote it. So the grader becomes a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``, Linux 3.4) before any submission runs: an orphan anywhere
below it is handed to it rather than to init, so every process the submission started stays
its descendant (``/proc/PID/stat``'s parent field), and ``end_descendants`` stops and kills them
all, the grader and its ancestors left alone. What this cannot reach: a process a root
submission had *another* process start (a service outside the grader's tree, or one it took over
with ``ptrace``), and changes such code made to the grader's own files or memory while it ran.
"""
from __future__ import annotations

import ctypes
import os

from ..procfs import process_stats

_PR_SET_CHILD_SUBREAPER = 36   # linux/prctl.h


def become_subreaper() -> bool:
    """-> whether orphans below this process now come to it (False where prctl refuses)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, ctypes.c_ulong(1), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0


def _parents() -> dict:
    """pid -> parent pid, for every process in /proc now."""
    parents = {}
    for pid, stat in process_stats():
        try:
            parents[pid] = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (ValueError, IndexError):
            continue
    return parents


def descendants(pid: int = None) -> list:
    """The processes below ``pid`` (this one by default), children first."""
    pid = os.getpid() if pid is None else pid
    children = {}
    for child, parent in _parents().items():
        children.setdefault(parent, []).append(child)
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        found.append(p)
        todo += children.get(p, [])
    return found


def end_descendants(rounds: int = 50) -> int:
    """Stop, then kill, every process below this one until none is left, and reap those that
    became this process's children. -> how many."""
    from .unprivileged import kill_until_none

    def reap(pids):   # an orphan handed to this subreaper is its child
        for p in pids:
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
    return kill_until_none(lambda: [p for p in descendants() if _alive(p)], rounds, reap)


def _alive(pid: int) -> bool:
    """Any of its threads alive (a leader that exited, state Z, may keep others running)."""
    from .unprivileged import _live, _state

    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = _state(f.read())[0]
    except (OSError, ValueError, IndexError):
        return False
    return _live(str(pid), state)
