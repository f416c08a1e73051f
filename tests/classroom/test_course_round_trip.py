"""A whole course, end to end, through the commands a teacher types: ``assign`` with per-student
variants, honest and hostile submissions, ``grade`` with a late policy, the HTML feedback pages,
``stats``, and the ``gradescope`` package of the same course run on a fake /autograder tree. Real grader, real
bubblewrap sandbox, real Chromium for one feedback page."""
import csv
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
from nbformat.v4 import new_code_cell, new_markdown_cell  # noqa: E402

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
import make_submissions as M  # noqa: E402
from gradescope_tree import run_autograder, unpack_tree  # noqa: E402

from gpumemlab.cli import main  # noqa: E402
from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.variants import PREVIEW_SEED, expected, variant_questions  # noqa: E402
from gpumemlab.devices.simulated import SimulatedGPU  # noqa: E402
from gpumemlab.units import KiB, MiB  # noqa: E402

pytestmark = pytest.mark.skipif(
    isolation.unavailable_reason() is not None,
    reason=f"no OS sandbox here ({isolation.unavailable_reason()}); .ci/run installs bubblewrap")

UTC = timezone.utc
DUE = datetime(2026, 12, 1, 17, 0, tzinfo=UTC)
# ids are the students' emails: the field Gradescope's metadata names them by, too
ALICE, BOB, EVE = "alice@example.org", "bob@example.org", "eve@example.org"
ROSTER = (f"id,first_name,last_name,email\n{ALICE},Alice,Liddell,{ALICE}\n"
          f"{BOB},Bob,Builder,{BOB}\n{EVE},Eve,Dropper,{EVE}\n")
VARIANT = "01.7"                      # a predict question of the banks: reserved MiB after ops
ANSWER, TEST = "variant-answer", "variant-test"
HIDDEN = "gml.quiz.assert_correct"    # every judge line is a hidden test


def course_source(path: Path) -> Path:
    """The fixture lab plus a per-student variant question (1 point), whose solution answers
    the teacher's preview variant, and a late policy in the notebook's metadata."""
    nb = nbformat.read(str(M.SOURCE), as_version=4)
    shown = new_markdown_cell("(your own numbers appear here)")
    shown.metadata["gpumemlab"] = {"variant": VARIANT}
    preview = float(expected(variant_questions(_with(nb, shown))[VARIANT][0],
                             PREVIEW_SEED).split()[0])
    answer = new_code_cell(f"### BEGIN SOLUTION\nvariant_mib = {preview!r}\n### END SOLUTION")
    answer.metadata["nbgrader"] = {"grade_id": ANSWER, "solution": True, "grade": False,
                                   "locked": False, "schema_version": 3}
    test = new_code_cell(f"assert isinstance(variant_mib, (int, float))\n"
                         f"### BEGIN HIDDEN TESTS\n{HIDDEN}('{VARIANT}', variant_mib)\n"
                         f"### END HIDDEN TESTS")
    test.metadata["nbgrader"] = {"grade_id": TEST, "solution": False, "grade": True,
                                 "points": 1, "locked": True, "schema_version": 3}
    nb.cells += [shown, answer, test]
    nb.metadata["gpumemlab"] = {"late": {"due": DUE.isoformat(), "per_day": "10%",
                                         "cap": "50%"}}
    path.parent.mkdir(parents=True)
    nbformat.write(nb, str(path))
    return path


def _with(nb, cell):
    import copy

    out = copy.deepcopy(nb)
    out.cells.append(cell)
    return out


def own_answer(nb) -> float:
    """What a student gets by running the ops their own notebook shows on the simulator."""
    cell = next(c for c in nb.cells if c.metadata.get("gpumemlab", {}).get("variant"))
    code = re.search(r"```python\n(.*?)\n```", cell.source, re.S).group(1)
    scope = {"SimulatedGPU": SimulatedGPU, "KiB": KiB, "MiB": MiB}
    exec(code, scope)
    return scope["gpu"].memory_reserved() / MiB


def submit(folder: Path, nb, submitted: datetime):
    folder.mkdir(parents=True)
    nbformat.write(nb, str(folder / "lab.ipynb"))
    (folder / "timestamp.txt").write_text(submitted.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("course")
    source = course_source(tmp / "teacher" / "lab.ipynb")
    (tmp / "roster.csv").write_text(ROSTER)
    secret, release = tmp / "teacher" / "course.secret", tmp / "release"
    _write_secret_with_three_variants(secret, source)
    assign = _cli(["assign", str(source), str(release), "--roster", str(tmp / "roster.csv"),
                   "--secret", str(secret), "--cell-timeout", "30"])
    handed = {s: nbformat.read(str(release / s / "lab.ipynb"), as_version=4)
              for s in (ALICE, BOB, EVE)}
    answers = {s: own_answer(nb) for s, nb in handed.items()}
    subs = tmp / "submitted"
    right = lambda s: {**M.RIGHT, ANSWER: f"variant_mib = {answers[s]!r}"}   # noqa: E731
    submit(subs / ALICE, M.answered(handed[ALICE], right(ALICE)),
           DUE - timedelta(hours=2))
    submit(subs / BOB, M.answered(handed[BOB], right(BOB)),
           DUE + timedelta(hours=30))                       # two started days late
    # eve: wrong answers, the test cells rewritten to print "passed", and alice's variant answer
    eve = M.hostile(handed[EVE], "edit_tests")
    eve = M.answered(eve, {ANSWER: f"variant_mib = {answers[ALICE]!r}"})
    submit(subs / EVE, eve, DUE - timedelta(minutes=5))
    out = tmp / "out" / "grades.csv"
    grade = _cli(["grade", str(subs), "--source", str(source), "--out", str(out),
                  "--roster", str(tmp / "roster.csv"), "--secret", str(secret),
                  "--cell-timeout", "30", "--timeout", "200", "--workers", "2"])
    rows = {r["student_id"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    stats = _cli(["stats", str(out), "--out", str(tmp / "stats")])
    return {"tmp": tmp, "source": source, "secret": secret, "release": release,
            "handed": handed, "answers": answers, "assign": assign, "grade": grade,
            "rows": rows, "out": out, "feedback": out.parent / "feedback", "stats": stats}


def _write_secret_with_three_variants(path: Path, source: Path):
    """A fixed course secret under which alice, bob and eve get three different answers.

    A fresh random secret made the test a lottery: the question's answers take a handful of
    values, so two of three students often shared one (CI failed on three 22 MiB variants).
    The first of a fixed series of secrets that gives three answers is used."""
    from gpumemlab.classroom.variants import student_seed

    question = variant_questions(nbformat.read(str(source), as_version=4))[VARIANT][0]
    for i in range(1000):
        secret = hashlib.sha256(f"gpumemlab course test {i}".encode()).digest()
        answers = {expected(question, student_seed(secret, "lab", s)) for s in (ALICE, BOB, EVE)}
        if len(answers) == 3:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(secret.hex() + "\n")
            return
    raise AssertionError("no secret of the series gives three variants")


def _cli(argv) -> dict:
    """Run the real command in a child (as a teacher would), with its exit status and output."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1")
    proc = subprocess.run([sys.executable, "-m", "gpumemlab.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=900)
    return {"status": proc.returncode, "out": proc.stdout, "err": proc.stderr}


def test_assign_writes_each_students_own_numbers_and_checks_them(course):
    assert course["assign"]["status"] == 0, course["assign"]
    # the teacher's existing secret is used as it is (making one is tested in test_classroom_variants)
    assert "created" not in course["assign"]["out"] + course["assign"]["err"]
    assert stat.S_IMODE(course["secret"].stat().st_mode) == 0o600
    answers = course["answers"]
    assert len(set(answers.values())) == 3, answers          # three students, three variants
    for nb in course["handed"].values():
        text = json.dumps(nb)
        assert HIDDEN not in text and "BEGIN SOLUTION" not in text
        assert "return max(512" not in text                    # the lab's solution


def test_grades_follow_the_answers_the_variants_and_the_late_policy(course):
    assert course["grade"]["status"] == 0, course["grade"]
    rows = course["rows"]
    assert "late policy: due 2026-12-01 17:00:00 UTC" in course["grade"]["err"]
    alice, bob, eve = rows[ALICE], rows[BOB], rows[EVE]
    assert (alice["raw_score"], alice["late_submission_penalty"], alice["score"],
            alice["max_score"]) == ("6", "0", "6", "6")
    # bob: all right, 30 h late: two started days at 10 % of 6 points
    assert (bob["raw_score"], bob["late_submission_penalty"], bob["score"]) == ("6", "1.2", "4.8")
    # eve: rewritten tests give nothing; alice's answer is wrong for eve's variant
    assert float(eve["raw_score"]) == 0, eve
    assert alice["last_name"] == "Liddell" and alice["duedate"] == "2026-12-01 17:00:00 UTC"
    items = {(r["student_id"], r["question"]): r
             for r in csv.DictReader((course["out"].parent / "items.csv").open())}
    assert items[(EVE, TEST)]["status"] == "failed"
    assert float(items[(EVE, TEST)]["answer"]) == course["answers"][ALICE]
    assert items[(BOB, TEST)]["status"] == "passed"


def test_the_secret_and_the_seeds_go_nowhere_a_student_sees(course):
    secret = course["secret"].read_text().strip()
    for path in course["out"].parent.rglob("*"):
        if path.is_file():
            assert secret not in path.read_text(encoding="utf-8", errors="replace"), path


def test_feedback_pages_show_own_answers_the_penalty_and_no_hidden_test(course):
    pages = {s: (course["feedback"] / s / "feedback.html").read_text(encoding="utf-8")
             for s in (ALICE, BOB, EVE)}
    assert f"variant_mib = {course['answers'][BOB]!r}" in pages[BOB]
    assert "Late penalty" in pages[BOB] and "Late penalty" not in pages[ALICE]
    for page in pages.values():
        assert HIDDEN not in page and "BEGIN HIDDEN" not in page and "BEGIN SOLUTION" not in page
    assert "return max(512" in pages[ALICE]            # her own (right) answer ...
    assert "return max(512" not in pages[EVE]          # ... never the solution to a wrong one
    txt = (course["feedback"] / BOB / "feedback.txt").read_text(encoding="utf-8")
    assert "score: 4.8 / 6 (raw score 6, late penalty 1.2)" in txt and "2 days late" in txt
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium here; .ci/run installs it")
    page = course["feedback"] / BOB / "feedback.html"
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    assert "Late penalty" in dom and "4.8" in dom and TEST in dom


def test_stats_name_the_variant_question_and_warn_where_it_matters(course):
    assert course["stats"]["status"] == 0, course["stats"]
    stats = {r["item"]: r for r in
             csv.DictReader((course["tmp"] / "stats" / "stats.csv").open(encoding="utf-8"))}
    assert set(stats) == {"round-size-test", "reserved-test", "frag-test", TEST}
    # alice and bob right, eve wrong on every question: two thirds right everywhere
    for row in stats.values():
        assert row["difficulty"] == "0.667", row
    page = (course["tmp"] / "stats" / "stats.html").read_text(encoding="utf-8")
    assert "data:image/png;base64," in page and TEST in page


def test_the_gradescope_package_grades_the_same_course_on_a_fake_tree(course, tmp_path):
    """The same source, variants and all, packed for Gradescope: bob's notebook handed in there
    30 h late is judged against his own variant, with the same late penalty."""
    out = tmp_path / "lab-autograder.zip"
    packed = _cli(["gradescope", str(course["source"]), str(out), "--secret",
                   str(course["secret"]), "--roster", str(course["tmp"] / "roster.csv"),
                   "--student-key", "email", "--cell-timeout", "30", "--timeout", "200"])
    assert packed["status"] == 0, packed
    assert "TEACHER ONLY" in packed["out"] + packed["err"]
    bob = nbformat.read(str(course["tmp"] / "submitted" / BOB / "lab.ipynb"), as_version=4)
    metadata = {"created_at": (DUE + timedelta(hours=30)).isoformat(),
                "assignment": {"due_date": DUE.isoformat(), "late_due_date": None,
                               "title": "Lab"},
                "users": [{"email": "Bob@Example.org", "id": 2, "name": "Bob"}]}
    results = run_autograder(unpack_tree(out, tmp_path / "autograder", bob, metadata))
    assert [(t["name"], t["score"]) for t in results["tests"]] == \
        [("round-size-test", 2.0), ("reserved-test", 1.0), ("frag-test", 2.0), (TEST, 1.0)]
    assert results["score"] == pytest.approx(4.8)            # 6 points, 2 days at 10 %
    assert "2 days late" in results["output"]
    shown = json.dumps(results)
    assert HIDDEN not in shown and course["secret"].read_text().strip() not in shown
