"""``grade --no-sandbox`` run by root: the submissions' code runs as an unprivileged uid of its own
(``unprivileged``).

One real grading run without bubblewrap (``gpumemlab grade --no-sandbox`` with an interpreter
nobody can start: ``fixtures/classroom/nobody_python.py``), two submissions: an honest one, and a hostile one
(right answers too) whose extra cell, through libc so that the in-kernel audit hook is not what
stops it, reads the teacher's notebook, writes into the grades' folder, and forks a ``setsid``'d
shell that would write a file 5 s later. What it managed goes into a drop box in its own
folder, which the grader keeps (``--keep``): a run's allow-list leaves ``/tmp`` out, and its
``/dev/shm`` is its own where root may mount (``isolation.space``).
The course lives in a folder every user may traverse; the teacher's folder is 0700 and the
grades' folder root's 0755, as the docs ask, so only the uid stands between them and the code.
"""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
import make_submissions as M  # noqa: E402
from nobody_python import (bin_without, python_for_nobody, skip_or_fail,  # noqa: E402,F401
                           unprivileged_mode)

from gpumemlab.classroom import grade  # noqa: E402
from gpumemlab.classroom.isolation import unprivileged  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402

# skipped only where the grader is not root; as root, anything missing fails
pytestmark = pytest.mark.usefixtures("unprivileged_mode")
EACCES = 13

ATTACK = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
held = ctypes.PyDLL(None, use_errno=True)   # fork with the GIL held: the child can run on

def cwrite(path, data, flags):
    fd = libc.open(path.encode(), flags, 0o666)
    if fd < 0:
        return ctypes.get_errno()
    libc.write(fd, data.encode(), len(data))
    libc.close(fd)
    return 0

def cread(path):
    fd = libc.open(path.encode(), 0)
    if fd < 0:
        return ctypes.get_errno()
    libc.close(fd)
    return 0

report = {{"ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()],
          "read_source": cread({source!r}),
          "forge": cwrite({out!r} + "/forged.txt", "x", 0o101),
          "append_grades": cwrite({out!r} + "/grades.csv", "x", 0o2001)}}
os.mkdir("box")
script = b"echo $$ > box/leftover.pid; sleep 5; echo alive > box/late.txt"
pid = held.fork()
if pid == 0:
    libc.setsid()
    libc.execv(b"/bin/sh", (ctypes.c_char_p * 4)(b"sh", b"-c", script, None))
    libc._exit(0)
report["forked"] = pid
cwrite("box/report.json", json.dumps(report), 0o1101)
print("report written")
"""


def _hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p).encode() + (p.read_bytes() if p.is_file() else b""))
    return h.hexdigest()


@pytest.fixture(scope="module")
def course():
    tmp = Path(tempfile.mkdtemp(prefix="gml-nobody-test-"))
    try:
        os.chmod(tmp, 0o755)   # the course folder: every user may traverse it
        teacher, subs, out = (tmp / n for n in ("teacher", "submitted", "out"))
        kept = tmp / "kept"   # the drop box: the hostile run's own folder, as the grader keeps it
        box = kept / "hostile" / "submission" / "box"
        teacher.mkdir(mode=0o700)
        os.chmod(teacher, 0o700)
        source = teacher / "lab.ipynb"
        source.write_bytes(M.SOURCE.read_bytes())
        out.mkdir()
        (out / "grades.csv").write_text("an earlier gradebook\n")
        student = student_version(nbformat.read(str(source), as_version=4))
        right = M.answered(student, M.RIGHT)
        (subs / "honest").mkdir(parents=True)
        nbformat.write(right, str(subs / "honest" / "lab.ipynb"))
        (subs / "hostile").mkdir()
        attack = ATTACK.format(source=str(source), out=str(out))
        nbformat.write(M.add_cell_after(right, "frag-answer", attack),
                       str(subs / "hostile" / "lab.ipynb"))
        yield {"tmp": tmp, "teacher": teacher, "subs": subs, "out": out, "box": box,
               "source": source, "kept": kept}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def graded(course):
    python = python_for_nobody(course["tmp"] / "python")
    if python is None:
        skip_or_fail("no interpreter here that an unprivileged user can start")
    before = _hash(course["teacher"])
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1")
    proc = subprocess.run([python, "-m", "gpumemlab.cli", "grade", str(course["subs"]),
                           "--source", str(course["source"]),
                           "--out", str(course["out"] / "grades.csv"), "--no-sandbox",
                           "--cell-timeout", "60", "--timeout", "200", "--workers", "2",
                           "--keep", str(course["kept"])],
                          env=env, capture_output=True, text=True, timeout=600)
    return {"status": proc.returncode, "stderr": proc.stderr, "before": before,
            "after": _hash(course["teacher"])}


def _feedback(course, student) -> str:
    return (course["out"] / "feedback" / student / "feedback.txt").read_text()


def test_both_score_full_and_their_feedback_says_as_whom_they_ran(course, graded):
    assert graded["status"] == 0, graded["stderr"]
    for student in ("honest", "hostile"):
        text = _feedback(course, student)
        assert "score: 5 / 5" in text, text
        assert grade.NOT_ISOLATED_NOBODY in text and "AS ROOT" not in text


def test_the_code_ran_as_nobody_and_reached_neither_the_teacher_nor_the_grades(course, graded):
    report = json.loads((course["box"] / "report.json").read_text())
    uid = report["ids"][0]   # a uid of the run's own: no account, no other process
    assert report["ids"] == [uid] * 4 and uid >= unprivileged.UID_FIRST
    assert (report["read_source"], report["forge"], report["append_grades"]) == (EACCES,) * 3
    assert not (course["out"] / "forged.txt").exists()
    assert "x" not in (course["out"] / "grades.csv").read_text().splitlines()[-1]
    assert graded["before"] == graded["after"]


def test_the_setsid_process_left_behind_was_killed(course, graded):
    pid = int((course["box"] / "leftover.pid").read_text())
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        status = ""   # gone: killed and reaped
    uid = json.loads((course["box"] / "report.json").read_text())["ids"][0]
    alive = status and "\nState:\tZ" not in status and f"\nUid:\t{uid}\t" in status
    assert not alive, status
    # the shell would write late.txt 5 s after it started, into its run's folder, gone by
    # then: its pid is what tells, looked at again past that time
    wait = (course["box"] / "leftover.pid").stat().st_mtime + 7 - time.time()
    if wait > 0:
        time.sleep(wait)
    assert not (course["box"] / "late.txt").exists()   # not before the run ended either
    status = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}").exists() else ""
    assert not (status and "\nState:\tZ" not in status and f"\nUid:\t{uid}\t" in status)


def test_the_teacher_is_told_what_nobody_can_reach(course, graded):
    # the submissions' folder is world-readable here (the umask's 0755): the warning names it;
    # the teacher's folder (0700) is not named
    warnings = [line for line in graded["stderr"].splitlines() if "WARNING" in line]
    assert any(f"who can read {course['subs']}" in w for w in warnings), graded["stderr"]
    assert not any(str(course["teacher"]) in w for w in warnings)
    assert stat.S_IMODE(course["teacher"].stat().st_mode) == 0o700


def test_without_setpriv_and_allowed_the_run_says_it_runs_as_root(tmp_path, monkeypatch):
    """With ``allow_root`` only (``--allow-root-runs``); without it, ``test_root_runs``."""
    monkeypatch.setenv("PATH", bin_without(tmp_path / "bin", "setpriv"))
    run = grade.open_run(grade.read_notebook(M.SOURCE), sandbox=False, allow_root=True)
    try:
        assert run.runs_as == "root" and "setpriv is not installed" in run.unprivileged_reason
        assert run.limits["processes"] == 0   # RLIMIT_NPROC would not bind root anyway
        note = run.not_isolated_note()
        assert note.startswith("NOT ISOLATED") and "AS ROOT" in note
        assert "setpriv is not installed" in note
        assert any("AS ROOT" in w for w in grade.unsandboxed_warnings(run))
    finally:
        run.close()


def test_a_runs_cleanup_kills_its_own_uid_only(tmp_path):
    """Leftovers are killed by the run's own uid: a sandboxed kernel (nobody) or another run's
    processes, alive at the same time, are untouched."""
    uid = unprivileged.pick_uid()
    other = unprivileged.pick_uid()
    procs = {}
    try:
        assert uid != other and not unprivileged._processes_of(uid)
        for name, who in (("mine", uid), ("other_run", other), ("sandbox", 65534)):
            procs[name] = subprocess.Popen(unprivileged.command(["sleep", "60"], who),
                                           start_new_session=True)
        time.sleep(0.5)
        assert unprivileged.kill_leftovers(0, uid) == 1
        assert procs["mine"].wait(timeout=10) == -9
        assert procs["other_run"].poll() is None and procs["sandbox"].poll() is None
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
        unprivileged.release_uid(uid)
        unprivileged.release_uid(other)
