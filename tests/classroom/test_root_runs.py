"""``grade --no-sandbox`` as root where no unprivileged user can run the submissions: nothing
runs, and the teacher reads one line saying why and what to do; with ``--allow-root-runs`` the
run goes on as root and says so (issue 34: it used to run them as root with a warning only).

setpriv is taken off PATH, which is what the probe sees on a machine without it and the same
refusal as an interpreter the run's uid cannot start (a venv under /root). The grader is made
to believe it is root where the test is not (the refusal is the root grader's rule); as root,
nothing is faked but PATH.
"""
import os

import pytest

nbformat = pytest.importorskip("nbformat")
import make_submissions as M  # noqa: E402
from nobody_python import bin_without  # noqa: E402

from gpumemlab.classroom import grade, isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.cli import main  # noqa: E402

# through libc: the in-kernel audit hook refuses Python's open() outside the submission
MARK = """
import ctypes
libc = ctypes.CDLL(None)
fd = libc.open({path!r}.encode(), 0o101, 0o644)   # O_WRONLY | O_CREAT
libc.write(fd, b"ran", 3)
libc.close(fd)
"""


@pytest.fixture
def course(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", bin_without(tmp_path / "bin", "setpriv"))
    if os.geteuid() != 0:
        monkeypatch.setattr(isolation, "running_as_root", lambda: True)
    teacher, subs, box = tmp_path / "teacher", tmp_path / "submitted", tmp_path / "box"
    for d in (teacher, subs / "alice", box):
        d.mkdir(parents=True)
    source = teacher / "lab.ipynb"
    source.write_bytes(M.SOURCE.read_bytes())
    right = M.answered(student_version(nbformat.read(str(source), as_version=4)), M.RIGHT)
    marker = box / "ran.txt"
    nbformat.write(M.add_cell_after(right, "frag-answer", MARK.format(path=str(marker))),
                   str(subs / "alice" / "lab.ipynb"))
    out = tmp_path / "out" / "grades.csv"
    out.parent.mkdir(mode=0o700)   # already closed: the only line is the error
    return {"source": source, "subs": subs, "out": out, "marker": marker}


def _grade(course, *extra):
    return main(["grade", str(course["subs"]), "--source", str(course["source"]),
                 "--out", str(course["out"]), "--no-sandbox", "--cell-timeout", "60",
                 "--timeout", "200", "--workers", "1", "--quiet", *extra])


def test_without_the_opt_in_nothing_runs_and_one_line_says_why(course, capsys):
    assert _grade(course) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("gpumemlab grade: error: cannot run submissions as an unprivileged")
    assert "setpriv is not installed" in line            # the cause
    assert "--allow-root-runs" in line and "/opt/gpumemlab-venv" in line   # the two fixes
    assert not course["marker"].exists()                 # the student's code never ran
    assert not course["out"].exists()


def test_with_the_opt_in_the_run_goes_on_as_root_and_says_so(course, capsys):
    assert _grade(course, "--allow-root-runs") == 0
    err = capsys.readouterr().err
    assert "AS ROOT, as asked (--allow-root-runs)" in err and "setpriv is not installed" in err
    feedback = (course["out"].parent / "feedback" / "alice" / "feedback.txt").read_text()
    assert course["marker"].read_text() == "ran", feedback + err
    assert "score: 5 / 5" in feedback and "AS ROOT, as the teacher allowed" in feedback


def test_the_opt_in_is_refused_with_the_sandbox(course, capsys):
    args = ["grade", str(course["subs"]), "--source", str(course["source"]),
            "--out", str(course["out"]), "--allow-root-runs"]
    assert main(args) == 2
    assert "--allow-root-runs goes with --no-sandbox" in capsys.readouterr().err
    assert not course["marker"].exists()


def test_open_run_leaves_no_kit_behind_when_it_refuses(course, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "kits"))
    (tmp_path / "kits").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)   # TMPDIR is read again
    with pytest.raises(grade.RootRunsRefused) as refused:
        grade.open_run(grade.read_notebook(M.SOURCE), sandbox=False)
    assert "setpriv is not installed" in refused.value.reason
    assert list((tmp_path / "kits").iterdir()) == []


def test_assign_still_checks_the_teachers_own_notebooks(course, tmp_path, monkeypatch, capsys):
    # the teacher's source and student version are not a student's code: without bwrap, as
    # root where no unprivileged user can run them, they still run (the rule is for grading)
    monkeypatch.setattr(isolation, "unavailable_reason", lambda: "bwrap is not installed")
    status = main(["assign", str(course["source"]), str(tmp_path / "release")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "the source passes every test; the student version fails every test" in out
