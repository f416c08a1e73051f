"""One run's cgroups on a cgroup v1 hierarchy: a CPU share, a task cap and a memory cap of its own.

The grader's rlimits bound each *process* (``RLIMIT_CPU``, ``RLIMIT_AS``) and each uid's task
count (``RLIMIT_NPROC``), not what a run takes from its classmates: a cell that forks a few
hundred busy loops gets a few hundred of the machine's scheduling shares, and an honest run graded
beside it (``--workers 2``) got a 240th of two cores. Where the machine mounts the v1
controllers (``/sys/fs/cgroup/cpu``, ``pids``, ``memory``: Linux's cgroup v1, as
``Documentation/admin-guide/cgroup-v1`` describes them) and the grader may make groups there
(root), each run (its bwrap, or its ``setpriv`` and everything below) is put in a group of its
own in each, made below the grader's own group of that hierarchy (``/proc/self/cgroup``):

* ``cpu``: ``cpu.shares`` 1024, so the scheduler gives the run's tasks together one share, as
  much as any other run's, however many tasks it has (CFS group scheduling);
* ``pids``: ``pids.max``, the run's task limit (threads count, as for ``RLIMIT_NPROC``);
* ``memory``: ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes`` where swap is
  accounted), which charges the run's anonymous memory, shared memory and tmpfs pages together,
  so hundreds of processes each under ``RLIMIT_AS`` cannot take the machine's memory.

A controller whose group cannot be made is left out (``controllers`` says which were made);
where none can be, ``run_groups`` gives None and the run goes without. ``close`` kills whatever
is still in the groups and removes them.
"""
from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_SHARES = 1024


def own_group(controller: str, table: str = None) -> str:
    """This process's group in the v1 hierarchy holding ``controller``, or None."""
    table = Path("/proc/self/cgroup").read_text() if table is None else table
    for line in table.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            return parts[2]
    return None


def _settings(controller: str, memory_bytes: int, processes: int) -> list:
    if controller == "cpu":
        return [("cpu.shares", CPU_SHARES)]
    if controller == "pids":
        return [("pids.max", int(processes))] if processes else []
    # memsw (memory + swap) must stay >= memory: the memory limit first
    return [("memory.limit_in_bytes", int(memory_bytes)),
            ("memory.memsw.limit_in_bytes", int(memory_bytes))] if memory_bytes else []


class RunGroups:
    """One run's groups, one per controller that could be made."""

    def __init__(self, memory_bytes: int, processes: int, root: Path = CGROUP_ROOT,
                 controllers=("cpu", "pids", "memory")):
        name = f"gml-run-{secrets.token_hex(6)}"
        self.paths, self.controllers = [], []
        for ctl in controllers:
            mine = own_group(ctl)
            if mine is None or not (Path(root) / ctl / "cgroup.procs").is_file():
                continue
            path = Path(root) / ctl / mine.lstrip("/") / name
            try:
                path.mkdir()
            except OSError:
                continue
            try:
                for key, value in _settings(ctl, memory_bytes, processes):
                    if (path / key).exists():
                        (path / key).write_text(str(value))
            except OSError:
                _remove(path)
                continue
            self.paths.append(path)
            self.controllers.append(ctl)

    def wrap(self, argv: list) -> list:
        """``argv`` started inside every group (the shell joins them, then becomes argv)."""
        procs = [str(p / "cgroup.procs") for p in self.paths]
        return ["/bin/sh", "-c", 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; '
                'done; shift; exec "$@"', "sh", *procs, "--"] + list(argv)

    def pids(self) -> list:
        found = set()
        for path in self.paths:
            try:
                found.update(int(x) for x in (path / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                continue
        return sorted(found)

    def close(self, wait_s: float = 5.0):
        """Kill what is left in the groups, then remove them (a group is removed once empty)."""
        deadline = time.monotonic() + wait_s
        for path in self.paths:
            while True:
                for pid in self.pids():
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                if _remove(path) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        self.paths = []


def _remove(path: Path) -> bool:
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


def run_groups(memory_bytes: int, processes: int, root: Path = CGROUP_ROOT):
    """A run's v1 groups where root can make at least one, else None."""
    if os.geteuid() != 0 or not Path(root).is_dir():
        return None
    groups = RunGroups(memory_bytes, processes, root)
    return groups if groups.paths else None
