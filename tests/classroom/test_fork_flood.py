"""A classmate's hundreds of busy loops must not time out an honest cell (issue 34).

A fresh-eyes review's attack on ``runner.CellClock``, which counted the cell's own kernel's CPU
time only: a "hog" (right answers) forks busy loops through libc (past the audit hook), each
in a session of its own, until the task limit refuses (some 237 were reported), then keeps its
notebook alive; an honest classmate graded beside it (``--workers 2``, ``--cell-timeout 10``)
has an answer cell needing 3 s of CPU. The review reported 3/5 for it in the sandbox and the
unprivileged mode. On the development machine (2 cores, autogroup scheduling on) the sandbox
case gave the honest classmate 5/5 before the fix as well (45 s for its 9 cells); it stays a
guard of the bound: each run's processes are now one cgroup with a CPU share and task cap of
their own (``isolation.cgroup_v1``, or a delegated cgroup v2), and a cell's clock counts the CPU
of every process of the run's uid (``procfs.uid_cpu``). Slow: several minutes per mode.
"""
import csv
import os
import subprocess
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
import make_submissions as M  # noqa: E402
from nobody_python import python_for_nobody, skip_or_fail  # noqa: E402

from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent
pytestmark = pytest.mark.slow

# through libc, past the audit hook: a shell (a small process, quick to fork) that starts busy
# loops until RLIMIT_NPROC refuses, then leaves them running (never reaped, no setsid)
# (each in a session of its own: the kernel's autogroup scheduling gives every session a share
# as large as a whole run's, so the loops together take hundreds of shares)
FLOOD = (b"i=0; while [ $i -lt 400 ]; do setsid sh -c 'while :; do :; done' & i=$((i+1)); "
         b"done 2>/dev/null")
HOG = f"""
import ctypes, time
libc = ctypes.CDLL(None)
if ctypes.PyDLL(None).fork() == 0:
    libc.execv(b"/bin/sh", (ctypes.c_char_p * 4)(b"sh", b"-c", {FLOOD!r}, None))
    libc._exit(0)
time.sleep(2)
"""
STAY = "import time\ntime.sleep(15)"
BURN = """
import time
_t = time.process_time()
while time.process_time() - _t < 3:   # 3 s of CPU, however long the wall clock takes
    pass
"""


def _submissions(tmp_path):
    source = tmp_path / "teacher" / "lab.ipynb"
    source.parent.mkdir()
    source.write_bytes(M.SOURCE.read_bytes())
    os.chmod(source.parent, 0o755)
    student = student_version(nbformat.read(str(source), as_version=4))
    subs = tmp_path / "submitted"
    hog = M.answered(student, M.RIGHT)
    hog.cells.insert(0, nbformat.v4.new_code_cell(HOG))
    for _ in range(5):
        hog = M.add_cell_after(hog, "frag-answer", STAY)
    honest = M.answered(student, {**M.RIGHT, "round-size-answer":
                                  BURN + M.RIGHT["round-size-answer"]})
    honest.cells.insert(0, nbformat.v4.new_code_cell("import time\ntime.sleep(20)"))
    for name, nb in (("hog", hog), ("honest", honest)):
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, str(subs / name / "lab.ipynb"))
    return source, subs


def _grade(tmp_path, python, *extra):
    source, subs = _submissions(tmp_path)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1")
    proc = subprocess.run([str(python), "-m", "gpumemlab.cli", "grade", str(subs), "--source",
                           str(source), "--out", str(out / "grades.csv"), "--cell-timeout", "10",
                           "--timeout", "300", "--workers", "2", *extra],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    feedback = (out / "feedback" / "honest" / "feedback.txt").read_text()
    return scores, feedback


@pytest.mark.skipif(isolation.unavailable_reason() is not None,
                    reason=f"no OS sandbox here ({isolation.unavailable_reason()})")
def test_hundreds_of_loops_in_a_sandbox_do_not_time_out_a_classmate(tmp_path):
    import sys

    scores, feedback = _grade(tmp_path, sys.executable)
    assert "stopped: timeout" not in feedback, feedback
    assert scores["honest"] == 5, feedback


def test_hundreds_of_loops_as_an_unprivileged_uid_do_not_time_out_a_classmate(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("the unprivileged mode needs a root grader")
    import shutil
    import tempfile

    # pytest's tmp_path is under a 0700 folder of root's: the run's uid could not reach the venv
    tmp = Path(tempfile.mkdtemp(prefix="gml-fork-flood-"))
    try:
        os.chmod(tmp, 0o755)
        python = python_for_nobody(tmp / "python")
        if python is None:
            skip_or_fail("no interpreter here that an unprivileged user can start")
        scores, feedback = _grade(tmp, python, "--no-sandbox")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert "stopped: timeout" not in feedback, feedback
    assert scores["honest"] == 5, feedback
