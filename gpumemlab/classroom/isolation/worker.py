"""Start one submission's notebook executor, wait for it, kill what it left, read its result.

The executor (``runner``) runs, kernel and all, in the bubblewrap sandbox (``isolation``); or,
without the sandbox, as an unprivileged uid of its own when the grader is root
(``unprivileged``: its folders handed over for the run and taken back, every process of that uid
killed before its result is read); or as the grader's own user. It is killed at the notebook's
wall limit. Its result file is the one thing read back, as untrusted JSON.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from .. import isolation
from . import landlock
from . import space as space_mod
from . import sysv
from . import unprivileged
from .cgroup_v1 import run_groups
from .confine import sandbox_cgroup

RESULT_LIMIT_BYTES = 8 << 20     # the executor's result file: verdicts, outputs and answers


def kill_group(pid) -> None:
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def decode(text, limit=RESULT_LIMIT_BYTES):
    """Answers JSON from the sandbox: plain data or None (NaN, huge, deep: None)."""
    if not isinstance(text, str) or len(text) > limit:
        return None

    def refuse(name):
        raise ValueError(name)
    try:
        return json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None


def run_worker(run, base, home, io, job_path, timeout, notes, space=None) -> dict:
    """Run the executor of one prepared submission (``grade.grade_one``) -> its result.
    ``space``: the ``space.RunSpace`` mounted at ``base`` for an unprivileged run, if any."""
    if run.runs_as != "nobody":
        return _start_worker(run, base, home, io, job_path, timeout, notes)
    uid = unprivileged.pick_uid()   # this run's alone: its leftovers are killed by uid
    hidden = unprivileged.installed_copies()   # the grader's gpumemlab and banks: not for it
    try:
        unprivileged.deny(hidden, uid)
        if space is not None:
            space.fit()   # the copy is in: what it holds plus RUN_DISK_BYTES
        unprivileged.hand_over(base, home, io, uid)
        return _start_worker(run, base, home, io, job_path, timeout, notes, uid,
                             bounded=space is not None and space.mounted)
    finally:
        unprivileged.take_back(base)
        unprivileged.allow_again(hidden, uid)
        unprivileged.release_uid(uid)


def _disk_watch(home, io, uid, shm_private, stop):
    """A ``space.Watchdog`` for a run whose folders are on the grader's disk: the copy as it
    is now plus RUN_DISK_BYTES, the shared temporary folders its uid writes counted in."""
    shared = tuple(d for d in space_mod.SHARED_TMP if not (shm_private and d == "/dev/shm"))
    start = space_mod.folder_bytes(home) + space_mod.folder_bytes(io)
    return space_mod.Watchdog([home, io], uid, start + space_mod.RUN_DISK_BYTES, stop,
                              shared=shared)


def _start_worker(run, base, home, io, job_path, timeout, notes, uid=None, bounded=False):
    # an unprivileged run starts with -S: its path is the kit and a view without gpumemlab
    inner = [sys.executable] + (["-S"] if run.runs_as == "nobody" else []) + \
        ["-m", "gpumemlab.classroom.runner", job_path]
    cleanup, fds, group = (lambda: None), (), None
    if run.sandbox:
        bound = isolation.python_roots() + ["/usr", "/etc"]
        masks = [d for d in run.deny_roots if any(d.startswith(b + os.sep) for b in bound)]
        argv, fds, cleanup = isolation.sandboxed_command(
            home, io, run.kit, inner, masks=masks, memory_bytes=run.limits["memory_bytes"])
        env = dict(os.environ)
    else:
        argv = unprivileged.command(inner, uid, kit=run.kit, writable=[base, home, io]) \
            if run.runs_as == "nobody" else inner
        # not the grader's PATH (root's may name /root/bin, a venv, pyenv's shims): the
        # sandbox's minimal one; the executor starts everything by absolute path
        env = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TZ")}
        env.update(PATH=isolation.KERNEL_PATH, HOME=str(home), PYTHONNOUSERSITE="1",
                   PYTHONPATH=unprivileged.python_path(run.kit) if run.runs_as == "nobody"
                   else str(run.kit))
        if run.runs_as == "nobody":   # its temporary files in its own folder, not /tmp
            env.update(unprivileged.private_env(io))
    if run.sandbox or run.runs_as == "nobody":   # a CPU share, task and memory caps of its own
        group = sandbox_cgroup(run.limits["memory_bytes"], run.limits["processes"]) or \
            run_groups(run.limits["memory_bytes"], run.limits["processes"])
        if group is not None:
            argv = group.wrap(argv)
    shm_private = run.runs_as == "nobody" and space_mod.private_shm_works()
    if shm_private:   # root mounts it, then setpriv drops root
        argv = space_mod.private_shm(argv)
    log = open(base / "worker.log", "wb")
    since = unprivileged.boot_ticks()
    try:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, pass_fds=fds,
                                start_new_session=True, cwd=str(io))
    finally:
        cleanup()
    watch = None
    # no watchdog only where every place the run may write is bounded: its tmpfs, a private
    # /dev/shm, and (Landlock's allow-list) no /tmp or /var/tmp
    if run.runs_as == "nobody" and not (bounded and shm_private and landlock.abi() >= 1):
        watch = _disk_watch(home, io, uid, shm_private,
                            lambda: unprivileged.kill_leftovers(since, uid))
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        notes.append(f"the notebook hit the {timeout:g} s limit; tests not reached score 0")
    finally:
        if run.runs_as == "nobody":   # before reading: nothing of the run may write it later
            kill_group(proc.pid)
            unprivileged.kill_leftovers(since, uid)
            if watch is not None:
                watch.close()
                if watch.tripped:
                    notes.append(f"the notebook wrote more than {watch.limit >> 20} MiB (its "
                                 f"folder and the shared temporary folders together: the limit "
                                 f"of one run), so it was stopped; tests not reached score 0")
            space_mod.remove_leftovers(uid)   # /dev/shm, /tmp: nothing of it stays
            sysv.remove_segments(uid)   # no IPC namespace: its shmget segments outlive it
            if bounded and space_mod.free_bytes(base) < 1 << 20:
                notes.append(f"the notebook filled the space its run may write (its folder: "
                             f"the copy plus {space_mod.RUN_DISK_BYTES >> 20} MiB, the limit "
                             f"of one run); writes past that failed")
        state = read_state(io / "result.json")
        kill_group(proc.pid)   # bwrap dies, and with it its PID namespace
        if run.runs_as in ("user", "root"):   # nobody's are all dead; this pid is untrusted
            kill_group(state.get("kernel_pid") if isinstance(state.get("kernel_pid"), int)
                        else None)
        proc.wait()
        log.close()
        if group is not None:
            group.close()
    if not state.get("finished") and not any("limit" in n for n in notes):
        notes.append(space_mod.disk_note(base.parent) or
                     "the grader could not finish this notebook; see the test outputs")
    return state


def read_state(path: Path) -> dict:
    """The executor's result file, which the sandbox could have replaced by anything: a
    regular file under the size limit holding a JSON object, or {}."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not (st.st_mode & 0o170000 == 0o100000) or st.st_size > RESULT_LIMIT_BYTES:
            return {}
        state = decode(f.read(RESULT_LIMIT_BYTES + 1).decode("utf-8", "replace"))
    return state if isinstance(state, dict) else {}
