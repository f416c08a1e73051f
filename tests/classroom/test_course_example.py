"""docs/COURSE.md's "A course from start to finish" works as written: its command block is read
from the document and each command is run as it stands, from an empty folder, starting with
``gpumemlab course example``; between ``assign`` and ``grade`` three students answer their own
variants from their own notebooks. Also: the example is what scripts/build_example_assignment.py
makes, and ``assign --roster --secret`` on a source without variants is one line."""
import csv
import os
import pathlib
import re
import shlex
import subprocess
import sys

import nbformat
import pytest

from gpumemlab.classroom import isolation
from gpumemlab.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "classroom"))
from variant_lab import answer_from_notebook  # noqa: E402  (what a student computes)
NB = "fragmentation_lab.ipynb"


def course_commands():
    """The commands of the section's bash block, continuation lines joined, comments dropped."""
    doc = (ROOT / "docs" / "COURSE.md").read_text(encoding="utf-8")
    section = doc.split("## A course from start to finish", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def _run(line, cwd):
    """One line of the block: `a && cd b` changes the folder, as a shell would."""
    for part in line.split("&&"):
        argv = shlex.split(part)
        if argv[0] == "cd":
            cwd = cwd / argv[1]
            continue
        assert argv[0] == "gpumemlab", line
        env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1")
        run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", *argv[1:]], cwd=cwd,
                             env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, f"{part}:\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}"
    return cwd


def submit(release, submitted, sid):
    """The student fills the three answer cells of their own notebook."""
    nb = nbformat.read(str(release / sid / NB), as_version=4)
    fills = {"round-size-answer": "def round_size(size):\n    return max(512, -(-size // 512) * 512)",
             "reserved-answer": f"reserved_mib = {answer_from_notebook(nb, '01.7')!r}",
             "oom-answer": f"oom = {answer_from_notebook(nb, 'lab.oom')!r}"}
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in fills:
            cell.source = fills[gid]
    (submitted / sid).mkdir(parents=True)
    nbformat.write(nb, str(submitted / sid / NB))
    # nbgrader collect's submission time: an hour before the block's due date (on time)
    (submitted / sid / "timestamp.txt").write_text("2026-12-01 16:00:00.000000 UTC")


def test_the_committed_example_is_what_the_script_builds():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_example_assignment.py"),
                          "--check"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_course_example_refuses_to_overwrite(tmp_path, capsys):
    assert main(["course", "example", str(tmp_path)]) == 0
    before = (tmp_path / NB).read_bytes()
    assert main(["course", "example", str(tmp_path)]) == 2
    assert "exists: choose an empty folder" in capsys.readouterr().err
    assert (tmp_path / NB).read_bytes() == before


def test_roster_and_secret_on_a_source_without_variants_is_one_line(tmp_path, capsys):
    src = ROOT / "tests" / "fixtures" / "classroom" / "source" / "lab.ipynb"
    (tmp_path / "roster.csv").write_text("id\nann\n")
    rc = main(["assign", str(src), str(tmp_path / "release"), "--roster",
               str(tmp_path / "roster.csv"), "--secret", str(tmp_path / "course.secret")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "no per-student variant questions" in err and "gpumemlab course example" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["roster.csv"]    # nothing written


@pytest.mark.slow
def test_course_md_runs_as_written(tmp_path):
    commands = course_commands()
    assert [shlex.split(c.split("&&")[0])[1] for c in commands] == \
        ["course", "assign", "grade", "stats", "gradescope"]
    cwd = _run(commands[0], tmp_path)
    cwd = _run(commands[1], cwd)
    ids = [r["id"] for r in csv.DictReader(open(cwd / "roster.csv"))]
    release = cwd / "release"
    assert sorted(p.name for p in release.iterdir()) == sorted(ids)
    assert (cwd / "course.secret").stat().st_mode & 0o777 == 0o600
    if isolation.unavailable_reason() is not None:
        pytest.skip(f"grade needs the OS sandbox ({isolation.unavailable_reason()}); "
                    f".ci/run installs bubblewrap")
    for sid in ids:
        submit(release, cwd / "submitted", sid)
    for line in commands[2:]:
        _run(line, cwd)
    grades = {r["student_id"]: r for r in csv.DictReader(open(cwd / "grades" / "grades.csv"))}
    assert sorted(grades) == sorted(ids)
    for sid in ids:                       # each answered their own variant: full marks
        row = grades[sid]
        assert float(row["score"]) == float(row["max_score"]) == 4.0, sid
        assert float(row["late_submission_penalty"]) == 0
        assert (cwd / "grades" / "feedback" / sid / "feedback.html").is_file()
    assert (cwd / "grades" / "stats.csv").is_file() and (cwd / "lab-autograder.zip").is_file()
