"""The grader against honest and hostile submissions (one grading run shared by the tests)."""
import csv
import hashlib
import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
TESTS = Path(__file__).resolve().parents[1]
import make_submissions as M  # noqa: E402

from gpumemlab.cli import main  # noqa: E402
from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402

pytestmark = pytest.mark.skipif(
    isolation.unavailable_reason() is not None,
    reason=f"no OS sandbox here ({isolation.unavailable_reason()}); .ci/run installs bubblewrap")

KINDS = ["loop", "stubborn_loop", "raises", "exit", "delete_tests", "edit_tests", "monkeypatch",
         "fake_pass", "files"]


def tree_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("classroom")
    source_dir = tmp / "teacher"
    source_dir.mkdir()
    source = source_dir / "lab.ipynb"
    source.write_bytes(M.SOURCE.read_bytes())
    student = student_version(nbformat.read(str(source), as_version=4))
    subs, target = tmp / "submitted", tmp / "elsewhere"
    target.mkdir()
    for kind in KINDS:
        (subs / kind).mkdir(parents=True)
        nbformat.write(M.hostile(student, kind, target=target), str(subs / kind / "lab.ipynb"))
    (subs / "right").mkdir()
    nbformat.write(M.answered(student, M.RIGHT), str(subs / "right" / "lab.ipynb"))
    (subs / "right" / "timestamp.txt").write_text("2026-11-30 10:00:00")
    (subs / "wrong").mkdir()
    nbformat.write(M.answered(student, M.WRONG), str(subs / "wrong" / "lab.ipynb"))
    (subs / "garbage").mkdir()
    (subs / "garbage" / "lab.ipynb").write_text("{not json")
    roster = tmp / "roster.csv"
    roster.write_text("id,first_name,last_name,email\nright,Ada,Lovelace,ada@example.org\n")
    before = (tree_hash(source_dir), tree_hash(subs))
    out = tmp / "out" / "grades.csv"
    status = main(["grade", str(subs), "--source", str(source), "--out", str(out),
                   "--roster", str(roster), "--cell-timeout", "10", "--timeout", "120",
                   "--workers", "2"])
    after = (tree_hash(source_dir), tree_hash(subs))
    rows = {r["student_id"]: r for r in csv.DictReader(out.open())}
    return {"status": status, "rows": rows, "out": out, "before": before, "after": after,
            "target": target, "tmp": tmp, "feedback": tmp / "out" / "feedback"}


def score(graded, student):
    return float(graded["rows"][student]["score"])


def test_run_finishes_and_csv_has_nbgrader_columns(graded):
    assert graded["status"] == 0
    with graded["out"].open() as f:
        header = next(csv.reader(f))
    assert header == ["assignment", "duedate", "timestamp", "student_id", "last_name",
                      "first_name", "email", "raw_score", "late_submission_penalty", "score",
                      "max_score"]
    assert set(graded["rows"]) == set(KINDS) | {"right", "wrong", "garbage"}
    row = graded["rows"]["right"]
    assert (row["first_name"], row["last_name"], row["email"]) == ("Ada", "Lovelace",
                                                                   "ada@example.org")
    assert row["timestamp"] == "2026-11-30 10:00:00" and row["max_score"] == "5"


def test_honest_submissions_get_what_they_deserve(graded):
    assert score(graded, "right") == 5
    assert score(graded, "wrong") == 0
    assert score(graded, "garbage") == 0


@pytest.mark.parametrize("kind", ["loop", "stubborn_loop", "raises", "exit"])
def test_a_broken_answer_costs_only_its_own_points(graded, kind):
    # The reserved answer (1 point) hangs, raises or kills the kernel; the other 4 points stand.
    assert score(graded, kind) == 4


@pytest.mark.parametrize("kind", ["delete_tests", "edit_tests", "monkeypatch", "fake_pass"])
def test_tampering_does_not_turn_wrong_answers_into_points(graded, kind):
    assert score(graded, kind) == 0


def test_file_access_outside_the_folder_is_blocked_and_answers_still_count(graded):
    assert score(graded, "files") == 5
    assert not (graded["target"] / "stolen.txt").exists()
    assert not (graded["tmp"] / "escape.txt").exists()
    assert not Path("/tmp/gml-hostile-touch").exists()


def test_teacher_files_and_submissions_are_unchanged(graded):
    assert graded["before"] == graded["after"]


def test_results_json_is_gradescope_shaped(graded):
    res = json.loads((graded["feedback"] / "raises" / "results.json").read_text())
    assert res["score"] == 4
    names = [t["name"] for t in res["tests"]]
    assert names == ["round-size-test", "reserved-test", "frag-test"]
    failed = [t for t in res["tests"] if t["status"] == "failed"]
    assert [t["name"] for t in failed] == ["reserved-test"]
    assert "reserved_mib" in failed[0]["output"]   # the NameError tells the student why
    text = (graded["feedback"] / "loop" / "feedback.txt").read_text()
    assert "[FAIL] reserved-test" in text and "timeout" in text
