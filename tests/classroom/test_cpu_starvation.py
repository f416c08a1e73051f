"""A classmate's busy loops must not time out an honest cell (issue 34's review, sandbox mode).

Two submissions graded side by side in the bubblewrap sandbox (two workers, ``--cell-timeout
20``): a "hog" with right answers whose first cell starts twelve ``setsid``'d shells spinning
for 90 s (through libc, past the audit hook) and whose notebook then stays alive, and an honest
one that waits a few seconds (the loops are up by then) and whose ``round_size`` answer cell
first computes for 4 s of CPU. On the 2-core machine those 4 s took more than 20 s of wall time
and the cell timed out (3/5); the cell's limit now counts its own kernel's CPU time, with a wall
cap of ``runner.WALL_FACTOR`` cell timeouts (``runner.CellClock``).
"""
import csv
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
import make_submissions as M  # noqa: E402

from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.cli import main  # noqa: E402

pytestmark = pytest.mark.skipif(
    isolation.unavailable_reason() is not None,
    reason=f"no OS sandbox here ({isolation.unavailable_reason()}); .ci/run installs bubblewrap")

HOG = """
import ctypes
libc = ctypes.CDLL(None)
held = ctypes.PyDLL(None)
for _ in range(12):
    if held.fork() == 0:
        libc.setsid()
        libc.execv(b"/bin/sh", (ctypes.c_char_p * 4)(b"sh", b"-c",
                   b"end=$(($(date +%s) + 90)); while [ $(date +%s) -lt $end ]; do :; done",
                   None))
        libc._exit(0)
"""
STAY = "import time\ntime.sleep(15)"   # the hog's run lasts while the loops spin
BURN = """
import time
_t = time.process_time()
while time.process_time() - _t < 4:   # 4 s of CPU, however long the wall clock takes
    pass
"""


def test_a_classmates_busy_loops_do_not_time_out_an_honest_cell(tmp_path):
    source = tmp_path / "teacher" / "lab.ipynb"
    source.parent.mkdir()
    source.write_bytes(M.SOURCE.read_bytes())
    student = student_version(nbformat.read(str(source), as_version=4))
    subs = tmp_path / "submitted"
    hog = M.answered(student, M.RIGHT)
    hog.cells.insert(0, nbformat.v4.new_code_cell(HOG))
    for _ in range(5):
        hog = M.add_cell_after(hog, "frag-answer", STAY)
    honest = M.answered(student, {**M.RIGHT, "round-size-answer":
                                  BURN + M.RIGHT["round-size-answer"]})
    honest.cells.insert(0, nbformat.v4.new_code_cell("import time\ntime.sleep(8)"))
    for name, nb in (("hog", hog), ("honest", honest)):
        (subs / name).mkdir(parents=True)
        nbformat.write(nb, str(subs / name / "lab.ipynb"))
    out = tmp_path / "out"
    assert main(["grade", str(subs), "--source", str(source), "--out", str(out / "grades.csv"),
                 "--cell-timeout", "20", "--timeout", "300", "--workers", "2"]) == 0
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(f)}
    feedback = (out / "feedback" / "honest" / "feedback.txt").read_text()
    assert "stopped: timeout" not in feedback, feedback
    assert scores["honest"] == 5, feedback
