"""The unprivileged-uid mode (``grade --no-sandbox`` as root; Gradescope's fallback) against the
attacks that beat it (issue 34) and a fresh-eyes review found: each one a student's cell, run through a shell so that the
in-kernel audit hook is not what stops it.

One real grading run, two workers, two submissions side by side: an honest one that takes a
while (so the runs overlap), and a hostile one (right answers too) whose shell waits for the
classmate's run folder to appear (in its processes' command lines) and then tries to list the
grader's temporary folder, read world-readable files the grader left there and in ``/tmp``,
leave a file there for a classmate, read the classmate's graded notebook and copy, overwrite
the classmate's ``result.json``, read last week's ``grades.csv``, import the grader's own
gpumemlab with ``python -I`` (the reference answers and the banks), list the banks' folder, and
find a kernel listening on TCP (a classmate's iopub channel could be read), and
leave a process whose main thread has exited (a zombie leader whose other thread writes a file
45 s later, after the run). What each try got (its exit status) goes into a drop box in its
own folder, which the grader keeps (``--keep``): ``/dev/shm`` is the run's own where the grader
may mount (``isolation.space``), so it is no drop box any more.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent / "fixtures" / "classroom"))
import make_submissions as M  # noqa: E402
from nobody_python import python_for_nobody, skip_or_fail, unprivileged_mode  # noqa: E402,F401

from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.classroom.isolation import landlock, unprivileged  # noqa: E402

# skipped only where the grader is not root; as root, anything missing fails
pytestmark = pytest.mark.usefixtures("unprivileged_mode")

SHELL = r'''
mkdir -p {box}
me=$(dirname "$PWD"); other=""; i=0
while [ $i -lt 60 ]; do
  # the grader's temporary folder cannot be listed (the allow-list): the classmate's run
  # folder is found in its processes' command lines, which /proc shows every user
  for f in /proc/[0-9]*/cmdline; do
    for d in $(tr '\0' '\n' < "$f" 2>/dev/null | grep -o '{tmp}/gml-grade-[A-Za-z0-9_]*'); do
      if [ "$d" != "$me" ]; then other="$d"; fi
    done
  done
  [ -n "$other" ] && break
  sleep 0.5; i=$((i+1))
done
echo "$other" > {box}/other.txt
# a classmate's kernel on 127.0.0.1 could be read: iopub needs no key (sniff.py subscribes to
# every TCP listener of another run's uid); its Unix sockets sit in its 0700 folder instead
{python} "$PWD/sniff.py" {box} > /dev/null 2>&1 &
ls {tmp} > /dev/null 2>&1; echo $? > {box}/list_tmp
cat {planted} > /dev/null 2>&1; echo $? > {box}/read_planted
cat {planted_tmp} > /dev/null 2>&1; echo $? > {box}/read_planted_tmp
(echo x > {tmp}/left_for_a_classmate.txt) 2>/dev/null; echo $? > {box}/drop_tmp
cat "$other/grader/graded.ipynb" > /dev/null 2>&1; echo $? > {box}/read_graded
cat "$other/submission/lab.ipynb" > /dev/null 2>&1; echo $? > {box}/read_copy
(echo '{{}}' > "$other/grader/result.json") 2>/dev/null; echo $? > {box}/write_result
cat {out}/grades.csv > /dev/null 2>&1; echo $? > {box}/read_grades
ls {out}/feedback > /dev/null 2>&1; echo $? > {box}/list_feedback
{python} -I -c "import gpumemlab.quizkit.bank" > /dev/null 2>&1; echo $? > {box}/import_isolated
ls {banks} > /dev/null 2>&1; echo $? > {box}/list_banks
{python} -c "
import ctypes, os, threading, time
open('{box}/zombie.pid', 'w').write(str(os.getpid()))
def later():
    time.sleep(45)   # past the end of the run: the grader must kill it first
    open('{box}/zombie_late.txt', 'w').write('alive')
threading.Thread(target=later).start()
ctypes.CDLL(None).pthread_exit(None)
" &
sleep 1
echo done > {box}/done
'''

SNIFF = r"""
import os, sys, time
import zmq
box, me, seen, heard = sys.argv[1], os.getuid(), set(), 0
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
end = time.time() + 40
while time.time() < end:
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(name).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and int(f[7]) not in (0, me) and f[1] not in seen:
                seen.add(f[1])
                sub.connect("tcp://127.0.0.1:%d" % int(f[1].split(":")[1], 16))
    if sub.poll(500):
        sub.recv_multipart()
        heard += 1
    open(box + "/sniffed", "w").write("%d %d" % (len(seen), heard))
"""

CELL = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
held = ctypes.PyDLL(None, use_errno=True)
pid = held.fork()
if pid == 0:
    libc.setsid()
    libc.execv(b"/bin/sh", (ctypes.c_char_p * 4)(b"sh", b"-c", {script!r}.encode(), None))
    libc._exit(0)
import time
time.sleep(25)   # the run stays alive while the shell works
"""


@pytest.fixture(scope="module")
def attacked():
    tmp = Path(tempfile.mkdtemp(prefix="gml-unpriv-attacks-"))
    boxes = []
    try:
        os.chmod(tmp, 0o755)
        teacher, subs, out, gtmp = (tmp / n for n in ("teacher", "submitted", "out", "tmp"))
        kept = tmp / "kept"   # the drop box: the hostile run's own folder, as the grader keeps it
        box = kept / "hostile" / "submission" / "box"
        teacher.mkdir(mode=0o700)
        out.mkdir(mode=0o755)    # last week's grades, in a folder as umask 022 makes it
        os.chmod(out, 0o755)
        (out / "grades.csv").write_text("student_id,score\nsomeone,3\n")
        (out / "feedback").mkdir(mode=0o755)
        os.chmod(out / "feedback", 0o755)
        gtmp.mkdir()
        os.chmod(gtmp, 0o755)
        # world-readable files the grader leaves in its temporary folder and in /tmp: DAC
        # lets any user read them; the allow-list must not
        planted = gtmp / "graders-notes" / "answers.txt"
        planted_tmp = Path(tempfile.mkdtemp(prefix="gml-planted-", dir="/tmp")) / "answers.txt"
        boxes.append(planted_tmp.parent)
        for f in (planted, planted_tmp):
            f.parent.mkdir(exist_ok=True)
            os.chmod(f.parent, 0o755)
            f.write_text("RIGHT = 42\n")
            os.chmod(f, 0o644)
        python = python_for_nobody(tmp / "python")
        if python is None:
            skip_or_fail("no interpreter here that an unprivileged user can start")
        source = teacher / "lab.ipynb"
        source.write_bytes(M.SOURCE.read_bytes())
        student = student_version(nbformat.read(str(source), as_version=4))
        right = M.answered(student, M.RIGHT)
        banks = unprivileged.installed_copies()[-1]
        script = SHELL.format(tmp=gtmp, box="$PWD/box", out=out, python=python, banks=banks,
                              planted=planted, planted_tmp=planted_tmp)
        (subs / "honest").mkdir(parents=True)
        nbformat.write(M.add_cell_after(right, "frag-answer", "import time\ntime.sleep(20)"),
                       str(subs / "honest" / "lab.ipynb"))
        (subs / "hostile").mkdir()
        nbformat.write(M.add_cell_after(right, "frag-answer", CELL.format(script=script)),
                       str(subs / "hostile" / "lab.ipynb"))
        (subs / "hostile" / "sniff.py").write_text(SNIFF)
        before = {p: _acl(p) for p in unprivileged.installed_copies()}
        env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1",
                   TMPDIR=str(gtmp))
        proc = subprocess.run([python, "-m", "gpumemlab.cli", "grade", str(subs),
                               "--source", str(source), "--out", str(out / "grades.csv"),
                               "--no-sandbox", "--cell-timeout", "60", "--timeout", "200",
                               "--workers", "2", "--keep", str(kept)],
                              env=env, capture_output=True, text=True, timeout=600)
        yield {"proc": proc, "box": box, "out": out, "before": before,
               "landlock": landlock.abi() >= 1}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in boxes:
            shutil.rmtree(folder, ignore_errors=True)


def _acl(path):
    try:
        return os.getxattr(path, "system.posix_acl_access")
    except OSError:
        return None


def _rc(box, name) -> int:
    return int((box / name).read_text().strip())


def _feedback(out, student) -> str:
    return (out / "feedback" / student / "feedback.txt").read_text()


def test_the_attack_ran_beside_a_classmate(attacked):
    assert attacked["proc"].returncode == 0, attacked["proc"].stderr
    assert (attacked["box"] / "done").exists()
    assert (attacked["box"] / "other.txt").read_text().strip(), "the runs did not overlap"


def test_a_classmates_run_can_be_neither_read_nor_changed(attacked):
    box = attacked["box"]
    assert _rc(box, "read_graded") != 0 and _rc(box, "read_copy") != 0
    assert _rc(box, "write_result") != 0
    assert "score: 5 / 5" in _feedback(attacked["out"], "honest")


def test_a_classmates_kernel_cannot_be_heard(attacked):
    # both runs' kernels were alive when the shell looked (the runs overlapped)
    assert (attacked["box"] / "other.txt").read_text().strip()
    # ports it found (ipykernel's fork pipe, a PULL socket, stays on TCP) and messages it heard
    ports, heard = map(int, (attacked["box"] / "sniffed").read_text().split())
    assert heard == 0, f"a classmate's kernel was heard on TCP ({ports} port(s))"


def test_the_graders_and_other_files_in_tmp_are_out_of_reach(attacked):
    # world-readable by their modes: the allow-list (Landlock) is what refuses them, and the
    # run's own temporary files went to its private folder (the honest run still scores 5/5)
    box = attacked["box"]
    if not attacked["landlock"]:
        skip_or_fail("this kernel has no Landlock: /tmp is readable in this mode (docs say so)")
    assert _rc(box, "list_tmp") != 0
    assert _rc(box, "read_planted") != 0 and _rc(box, "read_planted_tmp") != 0
    assert _rc(box, "drop_tmp") != 0   # nothing left there for a classmate's run either
    assert "score: 5 / 5" in _feedback(attacked["out"], "honest")


def test_earlier_grades_are_out_of_reach(attacked):
    box = attacked["box"]
    assert _rc(box, "read_grades") != 0 and _rc(box, "list_feedback") != 0
    assert "0700" in attacked["proc"].stderr


def test_the_graders_gpumemlab_and_banks_cannot_be_reached(attacked):
    box = attacked["box"]
    assert _rc(box, "import_isolated") != 0
    assert _rc(box, "list_banks") != 0
    # the ACL entries were the runs' alone: each folder is as it was
    assert {p: _acl(p) for p in attacked["before"]} == attacked["before"]


def test_a_zombie_leaders_threads_were_killed(attacked):
    box = attacked["box"]
    pid = int((box / "zombie.pid").read_text())
    wait = (box / "zombie.pid").stat().st_mtime + 47 - time.time()
    if wait > 0:
        time.sleep(wait)
    assert not (box / "zombie_late.txt").exists()
    assert not unprivileged._live(str(pid), b"Z") or not Path(f"/proc/{pid}").exists()


def test_a_zombie_leader_with_a_live_thread_counts_as_alive(tmp_path):
    """``_processes_of`` sees a process whose main thread exited; the old check (the leader's
    state only) did not."""
    uid = unprivileged.pick_uid()
    from gpumemlab.classroom.isolation import setpriv_nobody

    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(30,)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    proc = subprocess.Popen(setpriv_nobody("setpriv", uid) + [sys.executable, "-c", code],
                            cwd="/")
    try:
        deadline = time.monotonic() + 20
        state = b""
        while time.monotonic() < deadline:
            try:
                stat = Path(f"/proc/{proc.pid}/stat").read_bytes()
                state = stat[stat.rindex(b")") + 2:].split()[0]
            except OSError:
                break
            if state == b"Z":
                break
            time.sleep(0.05)
        if state != b"Z":
            pytest.skip("this interpreter did not leave its main thread a zombie")
        assert unprivileged._processes_of(uid) == [proc.pid]
        assert unprivileged.kill_leftovers(0, uid) == 1
        proc.wait(timeout=10)
        assert not unprivileged._processes_of(uid)
    finally:
        proc.kill()
        proc.wait()
        unprivileged.release_uid(uid)
