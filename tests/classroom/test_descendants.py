"""``isolation.descendants``: a process that forked twice (its own session, its parent gone)
stays below a subreaper, and ``end_descendants`` ends it; without the subreaper it is init's
orphan, out of the grader's tree (what let a root daemon rewrite Gradescope's results.json).
Run in a child interpreter, so that the test's own process is no subreaper afterwards."""
import subprocess
import sys

CHILD = r"""
import os, subprocess, sys, time
from gpumemlab.classroom.isolation import descendants as D
if sys.argv[1] == "reaper":
    assert D.become_subreaper()
subprocess.run(["/bin/sh", "-c", "setsid /bin/sh -c 'sleep 60' > /dev/null 2>&1 &"], check=True)
time.sleep(0.5)
below = [p for p in D.descendants() if D._alive(p)]
ended = D.end_descendants()
print(len(below), ended, len([p for p in D.descendants() if D._alive(p)]))
"""


def _run(mode):
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return tuple(int(x) for x in out)


def test_a_double_forked_process_stays_below_a_subreaper_and_is_ended():
    below, ended, left = _run("reaper")
    assert below >= 1 and ended == below and left == 0   # the shell (and its sleep)


def test_without_the_subreaper_it_escapes_the_tree():
    assert _run("plain")[0] == 0   # init's (or an outer subreaper's) now, not ours
