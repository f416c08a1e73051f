"""Three small holes a fresh-eyes review found in the grader (issue 34), each without a kernel:

* the executor (and its kernel) outside the sandbox inherited the grader's PATH (root's, with
  its own folders first); it now gets the sandbox's minimal one;
* a FIFO the student's code left in its home folder made ``grade_one(keep=...)`` raise
  (``shutil.copytree`` refuses named pipes), losing that student's grade; such entries are not
  kept now;
* the feedback said "a answer cell ... stopped".

The executor's run is replaced by a stand-in that does what the student's code would have
done (a FIFO in the private copy, a timeout event in the result); nothing else is faked.
"""
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

nbformat = pytest.importorskip("nbformat")
import make_submissions as M  # noqa: E402

from gpumemlab.classroom import grade as G  # noqa: E402
from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.classroom.isolation import worker  # noqa: E402


def test_the_executor_gets_a_minimal_path_not_the_graders(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/root/.local/bin:/root/.pyenv/shims:/usr/bin:/bin")
    seen = {}
    real = subprocess.Popen

    def popen(argv, **kw):
        seen["env"] = kw["env"]
        return real(["true"], **{k: v for k, v in kw.items() if k != "env"})
    monkeypatch.setattr(worker.subprocess, "Popen", popen)
    (tmp_path / "home").mkdir()
    (tmp_path / "io").mkdir()
    run = SimpleNamespace(runs_as="root", sandbox=False, kit=tmp_path / "kit")
    worker._start_worker(run, tmp_path, tmp_path / "home", tmp_path / "io", "job.json", 30, [])
    assert seen["env"]["PATH"] == "/usr/bin:/bin"   # was the grader's, /root/.local/bin first
    assert isolation.KERNEL_PATH == "/usr/bin:/bin"


@pytest.fixture
def one_submission(tmp_path, monkeypatch):
    monkeypatch.setattr(isolation, "running_as_root", lambda: False)   # the grader's own user
    source_nb = nbformat.read(str(M.SOURCE), as_version=4)
    folder = tmp_path / "submitted" / "ann"
    folder.mkdir(parents=True)
    nbformat.write(M.answered(student_version(source_nb), M.RIGHT), str(folder / "lab.ipynb"))
    run = G.open_run(source_nb, sandbox=False)
    yield run, folder
    run.close()


def _left_a_fifo_and_timed_out(run, base, home, io, job_path, timeout, notes, **kw):
    os.mkfifo(home / "pipe")   # what os.mkfifo in a student's cell leaves in its folder
    (home / "kept.txt").write_text("mine")
    return {"finished": True, "events": [
        {"cell": 3, "event": "timeout", "role": "answer", "grade_id": "frag-answer"}]}


def test_a_fifo_in_the_home_folder_does_not_lose_the_grade(one_submission, tmp_path,
                                                          monkeypatch):
    run, folder = one_submission
    monkeypatch.setattr(G, "_run_worker", _left_a_fifo_and_timed_out)
    keep = tmp_path / "kept"
    result = G.grade_one(run, "ann", folder, folder / "lab.ipynb", keep=keep)
    kept = keep / "ann" / "submission"
    assert (kept / "kept.txt").read_text() == "mine"
    assert not (kept / "pipe").exists() and not (kept / "pipe").is_symlink()
    assert result.max_score == 5


def test_the_feedback_says_an_answer_cell(one_submission, monkeypatch):
    run, folder = one_submission
    monkeypatch.setattr(G, "_run_worker", _left_a_fifo_and_timed_out)
    result = G.grade_one(run, "ann", folder, folder / "lab.ipynb")
    said = [n for n in result.notes if "stopped" in n]
    assert said == ["an answer cell (frag-answer) stopped: timeout; it was skipped and the "
                    "rest re-run"]
    assert not any("a answer" in n for n in result.notes)
