"""Two grader processes changing one folder's ACL at once keep each other's denials
(``isolation.acl``: a cross-process ``flock`` around each read and write of the list).

Two processes, started together, each shut a run's uid out of the same folder, check that its
entry is there (what keeps the grader's gpumemlab closed to that run), and let it back in, a
few thousand times. Before the lock, a change written back from a stale read dropped the other
process's entry (issue 34: the lock was per process).
"""
import os
import subprocess
import sys
import time

import pytest

from gpumemlab.classroom.isolation import acl

ROUNDS = 5000
CHURN = r"""
import os, sys, time
from gpumemlab.classroom.isolation import acl
folder, first, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
while not os.path.exists(go):   # both start at once
    time.sleep(0.001)
lost = 0
for i in range({rounds}):
    uid = first + i
    acl.deny([folder], uid)
    if not any(e[0] == acl._USER and e[2] == uid for e in acl._acl_read(folder)):
        lost += 1   # another grader wrote back a list without this run's entry
    acl.allow_again([folder], uid)
print(lost)
""".format(rounds=ROUNDS)


def _named(folder) -> list:
    return [e for e in acl._acl_read(folder) if e[0] == acl._USER]


def test_two_graders_at_once_lose_no_denial(tmp_path):
    folder = tmp_path / "gpumemlab"
    folder.mkdir()
    if acl.deny([folder], 1_999_999_999):
        pytest.skip("this file system has no POSIX ACLs")
    acl.allow_again([folder], 1_999_999_999)
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [subprocess.Popen([sys.executable, "-c", CHURN, str(folder), str(first), str(go)],
                              stdout=subprocess.PIPE, text=True, env=env)
             for first in (1_950_000_000, 1_960_000_000)]
    time.sleep(1.0)   # both interpreters up and waiting
    go.touch()
    lost = [int(p.communicate(timeout=300)[0].strip()) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert lost == [0, 0]
    assert _named(folder) == []   # and no entry brought back from a stale read
    assert not any(n == "system.posix_acl_access" for n in os.listxattr(folder))


def test_the_lock_file_of_another_user_is_refused(tmp_path, monkeypatch):
    planted = tmp_path / "planted.lock"
    planted.write_text("")
    if os.geteuid() == 0:
        os.chown(planted, 12345, 12345)
    else:
        pytest.skip("only root can give a file to another user")
    monkeypatch.setattr(acl, "lock_path", lambda: str(planted))
    folder = tmp_path / "f"
    folder.mkdir()
    with pytest.raises(PermissionError, match="cannot be trusted"):
        acl.deny([folder], 1_999_999_998)
    assert _named(folder) == []
