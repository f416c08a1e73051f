"""Disk and ``/dev/shm`` bounded per run in the unprivileged-uid mode (``grade --no-sandbox`` as
root; Gradescope's fallback), issue 34's review: ``RLIMIT_FSIZE`` bounded each file (32 MiB),
not their number, so one submission filled the grader's disk and two honest classmates scored
0/4, their feedback blaming them; and 256 MiB written to ``/dev/shm`` stayed there after grading.

Two submissions graded side by side (two workers): a "filler" with right answers whose cell
writes forty 16 MiB files in its folder (640 MiB: it notes how many MiB it got written before a
write failed), removes them (not where its own tmpfs is full: it is told so), then writes
sixteen 16 MiB files to ``/dev/shm`` through libc (past
the audit hook) and waits; and an honest one, which runs beside it. With mounts
(``isolation.space``: a tmpfs per run, a private ``/dev/shm``) the filler's writes fail past
``RUN_DISK_BYTES``; without them (``RunSpace`` and the private ``/dev/shm`` switched off in the
grader's process, as in a Docker container without CAP_SYS_ADMIN) the watchdog stops the
filler, and it alone is told so. Either way nothing of it stays in ``/dev/shm`` and the honest
classmate scores 5/5 with no note about limits.
"""
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
import make_submissions as M  # noqa: E402
from nobody_python import python_for_nobody, skip_or_fail, unprivileged_mode  # noqa: E402,F401

from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.classroom.isolation import space  # noqa: E402

pytestmark = pytest.mark.usefixtures("unprivileged_mode")

FILL = """
import ctypes, os, time
def note(name, mib):   # in place, in a block it already has: a full tmpfs still takes it
    with open(name, "r+") as f:
        f.write("%04d" % mib)
for name in ("filled.txt", "hoarded.txt"):
    open(name, "w").write("0000")
n = 0
chunk = b"x" * (16 << 20)
for i in range(40):
    try:
        with open(f"fill{i}.bin", "wb") as f:
            f.write(chunk)
    except OSError:
        break
    n += 16
    note("filled.txt", n)
for i in range(40 if CLEAN else 0):   # left full: the run is told it filled its space
    try:
        os.remove(f"fill{i}.bin")
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(16 << 20)
shm = 0
for i in range(16):
    fd = libc.open(f"/dev/shm/TAG-{i}".encode(), 0o101, 0o644)   # O_WRONLY | O_CREAT
    if fd < 0:
        break
    wrote = libc.write(fd, buf, 16 << 20)
    libc.close(fd)
    if wrote != 16 << 20:
        break
    shm += 16
    note("hoarded.txt", shm)
time.sleep(8)
"""

# the grader as a Docker container without CAP_SYS_ADMIN runs it: no mount can be made
NO_MOUNTS = """
import sys
from gpumemlab.classroom.isolation import space
space.private_shm_works = lambda: False
def no_mount(self, folder, size_bytes):
    self.folder, self.mounted = folder, False
space.RunSpace.__init__ = no_mount
from gpumemlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _grade(mounts: bool):
    tmp = Path(tempfile.mkdtemp(prefix="gml-unpriv-space-"))
    tag = f"gml-hoard-{os.getpid()}-{int(mounts)}"
    try:
        os.chmod(tmp, 0o755)
        teacher, subs, out, kept = (tmp / n for n in ("teacher", "submitted", "out", "kept"))
        teacher.mkdir(mode=0o700)
        python = python_for_nobody(tmp / "python")
        if python is None:
            skip_or_fail("no interpreter here that an unprivileged user can start")
        source = teacher / "lab.ipynb"
        source.write_bytes(M.SOURCE.read_bytes())
        right = M.answered(student_version(nbformat.read(str(source), as_version=4)), M.RIGHT)
        (subs / "filler").mkdir(parents=True)
        fill = FILL.replace("TAG", tag).replace("CLEAN", str(not mounts))
        nbformat.write(M.add_cell_after(right, "frag-answer", fill),
                       str(subs / "filler" / "lab.ipynb"))
        (subs / "honest").mkdir()
        nbformat.write(M.add_cell_after(right, "frag-answer", "import time\ntime.sleep(10)"),
                       str(subs / "honest" / "lab.ipynb"))
        env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1")
        start = [python, "-m", "gpumemlab.cli"] if mounts else [python, "-c", NO_MOUNTS]
        proc = subprocess.run(start + ["grade", str(subs), "--source", str(source),
                                       "--out", str(out / "grades.csv"), "--no-sandbox",
                                       "--cell-timeout", "90", "--timeout", "240",
                                       "--workers", "2", "--keep", str(kept)],
                              env=env, capture_output=True, text=True, timeout=600)
        home = kept / "filler" / "submission"

        def mib(name):
            return int((home / name).read_text()) if (home / name).exists() else 0
        left = sorted(p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(tag))
        return {"proc": proc, "filled": mib("filled.txt"), "hoarded": mib("hoarded.txt"),
                "left": left,
                "feedback": {s: (out / "feedback" / s / "feedback.txt").read_text()
                             for s in ("filler", "honest")}}
    finally:
        for p in Path("/dev/shm").glob(tag + "-*"):
            p.unlink()
        shutil.rmtree(tmp, ignore_errors=True)


def _honest_unharmed(graded):
    text = graded["feedback"]["honest"]
    assert "score: 5 / 5" in text, text
    assert "limit" not in text.split("NOT ISOLATED", 1)[-1].split("\n", 1)[-1]
    assert "could not finish" not in text and "disk" not in text


def test_with_mounts_a_run_fills_only_its_own_tmpfs_and_shm():
    if not space.private_shm_works():
        skip_or_fail("root cannot mount here (no CAP_SYS_ADMIN): the watchdog test covers it")
    graded = _grade(mounts=True)
    assert graded["proc"].returncode == 0, graded["proc"].stderr
    # before: all 640 MiB written to the grader's disk, 256 MiB left in /dev/shm
    assert 0 < graded["filled"] <= space.RUN_DISK_BYTES >> 20
    assert graded["hoarded"] <= space.SHM_BYTES >> 20
    assert graded["left"] == []
    assert "filled the space its run may write" in graded["feedback"]["filler"]
    _honest_unharmed(graded)


def test_without_mounts_the_watchdog_stops_the_filler_alone():
    graded = _grade(mounts=False)
    assert graded["proc"].returncode == 0, graded["proc"].stderr
    assert "wrote more than" in graded["feedback"]["filler"]
    assert graded["left"] == []   # removed after the run: the uid's files in /dev/shm
    _honest_unharmed(graded)
    print(f"filler wrote {graded['filled']} MiB in its folder, {graded['hoarded']} MiB in "
          f"/dev/shm before it was stopped", file=sys.stderr)


def test_a_run_failed_on_a_full_grader_disk_is_told_it_is_not_its_doing(tmp_path):
    """The note a run that did not finish gets when the grader's own disk is nearly full (a
    tmpfs of 128 MiB, filled, stands for that disk); with room, no such note."""
    disk = space.RunSpace(tmp_path, 128 << 20)
    if not disk.mounted:
        skip_or_fail("root cannot mount here (no CAP_SYS_ADMIN)")
    try:
        assert space.disk_note(tmp_path) == ""
        with open(tmp_path / "fill", "wb") as f:
            try:
                f.write(b"x" * (100 << 20))
            except OSError:
                pass
        note = space.disk_note(tmp_path)
        assert "disk was nearly full" in note and "not be yours to answer for" in note
    finally:
        disk.close()
