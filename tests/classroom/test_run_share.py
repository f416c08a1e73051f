"""A run's CPU, tasks and memory counted and capped as one (issue 34's fork flood).

``procfs.uid_cpu`` and ``runner.CellClock(uid=...)``: the CPU of every process of a uid, and a
cell stopped with all of them once they used its limit (real processes of a fresh uid, so
root only). ``cgroup_v1.RunGroups``: real groups on this machine's v1 hierarchy (root only),
their settings, a process started in all of them, and their removal with what was left in them.
"""
import os
import shutil
import subprocess
import time

import pytest

from gpumemlab.classroom import procfs, runner
from gpumemlab.classroom.isolation import cgroup_v1, setpriv_nobody, unprivileged

root_only = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                               reason="needs root and setpriv")
LOOP = ["/bin/sh", "-c", "while :; do :; done"]


def _loops_as(uid, n):
    return [subprocess.Popen(setpriv_nobody("setpriv", uid) + LOOP, start_new_session=True)
            for _ in range(n)]


@root_only
def test_a_uids_cpu_is_the_sum_of_its_processes_and_the_clock_kills_them_all():
    uid = unprivileged.pick_uid()
    procs = _loops_as(uid, 3)
    try:
        time.sleep(1.0)
        cpu, pids = procfs.uid_cpu(uid)
        assert sorted(pids) == sorted(p.pid for p in procs)
        assert cpu > 0.3   # three loops, on whatever share of the cores they got
        clock = runner.CellClock(procs[0].pid, 1.0, every_s=0.05, uid=uid)
        deadline = time.monotonic() + 30
        while not clock.expired and time.monotonic() < deadline:
            time.sleep(0.05)
        clock.close()
        assert clock.expired
        for p in procs:   # not only the "kernel": every process of the uid
            assert p.wait(timeout=10) == -9
        assert procfs.uid_cpu(uid) == (0.0, [])
    finally:
        unprivileged.kill_leftovers(0, uid)
        for p in procs:
            p.wait()
        unprivileged.release_uid(uid)


def test_own_group_reads_the_v1_table():
    table = "8:pids:/a\n4:memory:/process_api/x\n2:cpu,cpuacct:/b\n0::/\n"
    assert cgroup_v1.own_group("cpu", table) == "/b"
    assert cgroup_v1.own_group("memory", table) == "/process_api/x"
    assert cgroup_v1.own_group("freezer", table) is None


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isfile("/sys/fs/cgroup/cpu/cgroup.procs"),
                    reason="needs root and a cgroup v1 cpu hierarchy")
def test_a_run_gets_groups_of_its_own_and_they_go_with_it():
    groups = cgroup_v1.run_groups(1 << 30, 64)
    assert groups is not None and "cpu" in groups.controllers
    paths = list(groups.paths)
    settings = {"cpu": ("cpu.shares", "1024"), "pids": ("pids.max", "64"),
                "memory": ("memory.limit_in_bytes", str(1 << 30))}
    for ctl, path in zip(groups.controllers, paths):
        key, value = settings[ctl]
        assert (path / key).read_text().strip() == value
    proc = subprocess.Popen(groups.wrap(["sleep", "60"]))
    try:
        deadline = time.monotonic() + 10
        while proc.pid not in groups.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        table = open(f"/proc/{proc.pid}/cgroup").read()
        for ctl, path in zip(groups.controllers, paths):   # in each, below the grader's own
            assert cgroup_v1.own_group(ctl, table) == \
                cgroup_v1.own_group(ctl).rstrip("/") + "/" + path.name, table
        groups.close()   # kills what is left
        assert proc.wait(timeout=10) == -9
        assert not any(p.exists() for p in paths)
    finally:
        proc.kill()
        proc.wait()
        groups.close()


SHM = ("import ctypes; libc = ctypes.CDLL(None); "
       "assert libc.shmget(0, 1 << 20, 0o1600) >= 0")   # IPC_PRIVATE, IPC_CREAT | 0600


@root_only
def test_a_uids_shared_memory_segments_are_removed_after_it():
    import sys

    uid = unprivileged.pick_uid()
    try:
        subprocess.run(setpriv_nobody("setpriv", uid) + [sys.executable, "-S", "-c", SHM],
                       check=True, timeout=60)
        from gpumemlab.classroom.isolation import sysv

        left = sysv.segments_of(uid)
        assert len(left) == 1   # the process is gone; its segment is not
        assert sysv.remove_segments(uid) == 1
        assert sysv.segments_of(uid) == []
        assert str(left[0]) not in [line.split()[1] for line in
                                    open("/proc/sysvipc/shm").read().splitlines()[1:]]
    finally:
        unprivileged.release_uid(uid)


HOLD = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")


def test_a_uid_another_grader_holds_is_not_taken(tmp_path):
    import sys

    uid = unprivileged.UID_FIRST + 7
    other = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / str(uid))],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"   # another grader's run has it
        assert not unprivileged._lock_uid(uid, tmp_path)
        assert unprivileged._lock_uid(uid + 1, tmp_path)   # a free one is taken
        other.kill()
        other.wait()
        assert unprivileged._lock_uid(uid, tmp_path)       # a dead grader holds nothing
    finally:
        other.kill()
        other.wait()
        for u in (uid, uid + 1):
            unprivileged._unlock_uid(u)
    assert not (tmp_path / str(uid)).exists()
