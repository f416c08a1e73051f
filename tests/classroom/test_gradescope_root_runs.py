"""Gradescope's ``run_autograder`` (root) without the sandbox, where no unprivileged user can run
the notebook: not graded, score 0 and the reason, nothing of the submission run, unless the
settings allow runs as root (``gpumemlab gradescope --allow-root-runs``); then it runs and the
results and the teacher's log say AS ROOT (issue 34: it used to run as root with a note only).

A fake ``/autograder`` tree with the settings ``pack`` writes, graded in this process
(``gradescope.run.run``): bubblewrap is reported missing, setpriv is off PATH (the probe's
refusal, as for an interpreter under /root), and where the test is not root the grader is made
to believe it is (the refusal is the root grader's rule).
"""
import json
import os
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
import make_submissions as M  # noqa: E402
from nobody_python import bin_without  # noqa: E402

from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.classroom.gradescope import pack as P  # noqa: E402
from gpumemlab.classroom.gradescope import run as R  # noqa: E402
from gpumemlab.classroom.gradescope.config import CONFIG_NAME, TEACHER_DIR  # noqa: E402
from gpumemlab.cli import main  # noqa: E402

MARK = """
import ctypes
libc = ctypes.CDLL(None)
fd = libc.open({path!r}.encode(), 0o101, 0o644)   # O_WRONLY | O_CREAT, past the audit hook
libc.write(fd, b"ran", 3)
libc.close(fd)
"""


def _tree(tmp_path, allow_root_runs: bool, cell: str = None, answers=None) -> dict:
    root, marker = tmp_path / "autograder", tmp_path / "ran.txt"
    source_nb = nbformat.read(str(M.SOURCE), as_version=4)
    config = P._config(source_nb, "lab.ipynb", assignment="lab", cell_timeout=60, timeout=200,
                       memory_mb=None, sandbox="auto", late=None, visibility=(),
                       allow_root_runs=allow_root_runs)
    (root / "source" / TEACHER_DIR).mkdir(parents=True)
    (root / "source" / CONFIG_NAME).write_text(json.dumps(config))
    (root / "source" / TEACHER_DIR / "lab.ipynb").write_bytes(M.SOURCE.read_bytes())
    (root / "submission").mkdir()
    right = M.answered(student_version(source_nb), answers or M.RIGHT)
    nbformat.write(M.add_cell_after(right, "frag-answer", cell or MARK.format(path=str(marker))),
                   str(root / "submission" / "lab.ipynb"))
    return {"root": root, "marker": marker}


@pytest.fixture
def no_bwrap_no_setpriv(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", bin_without(tmp_path / "bin", "setpriv", "bwrap"))
    monkeypatch.setattr(isolation, "unavailable_reason",
                        lambda: "bwrap is not installed (Debian: apt-get install bubblewrap)")
    if os.geteuid() != 0:
        monkeypatch.setattr(isolation, "running_as_root", lambda: True)


def test_not_graded_and_nothing_ran_unless_root_runs_are_allowed(tmp_path, no_bwrap_no_setpriv):
    tree = _tree(tmp_path, allow_root_runs=False)
    data = R.run(tree["root"])
    assert data["score"] == 0 and data["tests"] == []
    out = data["output"]
    assert out.startswith("Not graded: the OS sandbox cannot run in this container (bwrap")
    assert "cannot run as an unprivileged user (setpriv is not installed" in out
    assert "gpumemlab gradescope --allow-root-runs" in out and "not a problem with your" in out
    assert not tree["marker"].exists()
    written = json.loads((tree["root"] / "results" / "results.json").read_text())
    assert written["output"] == out


def test_allowed_root_runs_are_graded_and_say_as_root(tmp_path, no_bwrap_no_setpriv, capsys):
    tree = _tree(tmp_path, allow_root_runs=True)
    data = R.run(tree["root"])
    assert data["score"] == 5 and tree["marker"].read_text() == "ran"
    first = data["output"].splitlines()[0]
    assert first.startswith("NOT ISOLATED") and "AS ROOT (the autograder allows it: " \
        "--allow-root-runs; it could not run as an unprivileged user: setpriv is not" in first
    assert "AS ROOT, as asked (--allow-root-runs)" in capsys.readouterr().out   # the log


def test_the_pack_flag_writes_the_setting_and_says_so(tmp_path, capsys):
    config = P._config(nbformat.read(str(M.SOURCE), as_version=4), "lab.ipynb",
                       assignment="lab", cell_timeout=30, timeout=300, memory_mb=None,
                       sandbox="auto", late=None, visibility=())
    assert config["allow_root_runs"] is False   # the default: refuse
    out = tmp_path / "lab.zip"
    dist = tmp_path / "gpumemlab-0.1-py3-none-any.whl"
    import zipfile

    with zipfile.ZipFile(dist, "w") as zf:   # a stand-in kit: pack only reads its metadata
        zf.writestr("gpumemlab-0.1.dist-info/METADATA", "Name: gpumemlab\nVersion: 0.1\n"
                    "Requires-Dist: torch>=2.1\n")
    assert main(["gradescope", str(M.SOURCE), str(out), "--dist", str(dist),
                 "--allow-root-runs"]) == 0
    assert "notebooks may run AS ROOT (--allow-root-runs)" in capsys.readouterr().out
    with zipfile.ZipFile(out) as zf:
        assert json.loads(zf.read(CONFIG_NAME))["allow_root_runs"] is True


def test_the_image_check_stops_where_nothing_would_be_graded(tmp_path, no_bwrap_no_setpriv,
                                                             capsys):
    refused = _tree(tmp_path / "refused", allow_root_runs=False)
    assert R.check(refused["root"]) == 1
    out = capsys.readouterr().out
    assert "notebooks CANNOT run as an unprivileged user here (setpriv is not installed" in out
    allowed = _tree(tmp_path / "allowed", allow_root_runs=True)
    assert R.check(allowed["root"]) == 0
    assert "notebooks run AS ROOT (--allow-root-runs" in capsys.readouterr().out


# a daemon (forked twice, its own session: init's orphan) that waits for results.json and then
# rewrites it with full marks, again and again for a minute
DAEMON = """
import ctypes
libc = ctypes.CDLL(None)
held = ctypes.PyDLL(None)
pid = held.fork()
if pid == 0:
    libc.setsid()
    if libc.fork() == 0:
        libc.execv(b"/bin/sh", (ctypes.c_char_p * 4)(b"sh", b"-c", {script!r}.encode(), None))
    libc._exit(0)
libc.waitpid(pid, None, 0)
import os, time
for _ in range(200):   # until the daemon is up (the run could end before it starts)
    if os.path.exists({pid_file!r}):
        break
    time.sleep(0.05)
"""
REWRITE = """
echo $$ > {pid}
i=0
while [ $i -lt 600 ]; do
  if [ -f {results} ] && ! grep -q rewritten {results}; then
    sleep 0.2
    printf '{{"score": 5.0, "output": "rewritten", "tests": []}}' > {results}.x
    mv {results}.x {results}
  fi
  sleep 0.1; i=$((i+1))
done
"""


def test_a_daemon_left_as_root_cannot_rewrite_the_results(tmp_path, no_bwrap_no_setpriv):
    """Before: the daemon outlived the run and rewrote results.json to 5/5 (wrong answers,
    0/5); now it is ended before results.json is written, which reads back as written."""
    pid_file = tmp_path / "daemon.pid"
    results = tmp_path / "autograder" / "results" / "results.json"
    script = REWRITE.format(pid=pid_file, results=results)
    tree = _tree(tmp_path, allow_root_runs=True, cell=DAEMON.format(script=script, pid_file=str(pid_file)),
                 answers=M.WRONG)
    try:
        data = R.run(tree["root"])
        assert pid_file.exists(), data["output"]
        time.sleep(2)   # the daemon would have rewritten it by now
        written = json.loads(results.read_text())
        assert written == data and written["score"] == 0, written
        daemon = int(pid_file.read_text())
        assert not os.path.exists(f"/proc/{daemon}") or \
            Path(f"/proc/{daemon}/stat").read_text().split(")")[-1].split()[0] == "Z"
    finally:
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text()), 9)
            except OSError:
                pass
