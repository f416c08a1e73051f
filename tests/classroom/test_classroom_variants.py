"""Per-student variants: the course secret, each student's seed, their own notebook, and grading
each student against the variant they were shown (real grader, real bwrap sandbox)."""
import csv
import json
import os
import re
import stat
import sys

import pytest

nbformat = pytest.importorskip("nbformat")

from gpumemlab.cli import main  # noqa: E402
from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.cells import NotebookFormatError  # noqa: E402
from gpumemlab.classroom.intake import safe_name  # noqa: E402
from gpumemlab.classroom.reports import read_roster  # noqa: E402
from gpumemlab.classroom.variants import (PREVIEW_SEED, VariantError, expected,  # noqa: E402
                                          load_or_create, read_secret, student_seed,
                                          variant_questions)

from variant_lab import (ROSTER, SECRET, TEMPLATE, answer_from_notebook, answered,  # noqa: E402
                         source_nb, variant_cell)

needs_sandbox = pytest.mark.skipif(
    isolation.unavailable_reason() is not None,
    reason=f"no OS sandbox here ({isolation.unavailable_reason()}); .ci/run installs bubblewrap")


@pytest.fixture
def files(tmp_path):
    src = tmp_path / "teacher" / "lab.ipynb"
    src.parent.mkdir()
    nbformat.write(source_nb(), str(src))
    (tmp_path / "roster.csv").write_text(ROSTER)
    (tmp_path / "course.secret").write_text(SECRET + "\n")
    os.chmod(tmp_path / "course.secret", 0o600)   # a secret others may read is refused
    return tmp_path, src


# -- the seed --

def test_seeds_differ_by_student_assignment_and_secret_and_repeat():
    s1, s2 = bytes(32), bytes([1]) * 32
    base = student_seed(s1, "lab", "alice")
    assert base == student_seed(s1, "lab", "alice")
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    others = {student_seed(s1, "lab", "bob"), student_seed(s1, "lab2", "alice"),
              student_seed(s2, "lab", "alice"), student_seed(s1, "labalice", ""),
              student_seed(s1, "la", "balice")}
    assert len(others) == 5 and base not in others


def test_secret_is_created_private_and_read_back(tmp_path):
    path = tmp_path / "course.secret"
    secret, created = load_or_create(path)
    assert created and len(secret) == 32
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create(path) == (secret, False) and read_secret(path) == secret


@pytest.mark.parametrize("text", ["", "not hex at all", "abcd", "5e" * 31, "zz" * 40])
def test_a_secret_that_does_not_parse_is_one_line(tmp_path, text):
    path = tmp_path / "s"
    path.write_text(text)
    os.chmod(path, 0o600)
    with pytest.raises(VariantError, match="is not a secret gpumemlab wrote") as info:
        read_secret(path)
    assert "\n" not in str(info.value)


# -- markup --

@pytest.mark.parametrize("edit, message", [
    (lambda nb: nb.cells.append(variant_cell("01.999")), "unknown variant question '01.999'"),
    (lambda nb: nb.cells.append(variant_cell("01.5")), "01.5 is a code question"),
    (lambda nb: nb.metadata["gpumemlab"]["variants"].append(
        {"id": "lab.x", "generator": "nope"}), "unknown generator 'nope'"),
    (lambda nb: nb.metadata["gpumemlab"]["variants"].append(
        {"id": "lab.y", "generator": "reuse"}), "'lab.y' is never shown"),
    (lambda nb: nb.metadata["gpumemlab"]["variants"].__setitem__(
        0, dict(TEMPLATE, params={"steps": 10 ** 9})), "params may only hold 'steps'"),
    (lambda nb: nb.cells[4].__setitem__("source", "gml.quiz.assert_correct('01.7', reserved_mib)"),
     "between ### BEGIN HIDDEN TESTS"),
])
def test_bad_variant_markup_is_a_one_line_error(edit, message, tmp_path, capsys):
    nb = source_nb()
    edit(nb)
    with pytest.raises(NotebookFormatError, match=re.escape(message)):
        variant_questions(nb)
    src = tmp_path / "bad.ipynb"
    nbformat.write(nb, str(src))
    (tmp_path / "r.csv").write_text(ROSTER)
    assert main(["assign", str(src), str(tmp_path / "o"), "--no-check", "--roster",
                 str(tmp_path / "r.csv"), "--secret", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ipynb", "r.csv"]


# -- the roster --

@pytest.mark.parametrize("text, message", [
    (ROSTER + "bob,Bob,Again,b2@x\n", "id 'bob' is listed twice"),
    ("", "needs a header with an 'id' column"),
    ("id,first_name\n,Nobody\n", "empty id"),
])
def test_bad_rosters_are_one_line_errors(tmp_path, text, message):
    path = tmp_path / "r.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_roster(path)
    with pytest.raises(ValueError, match="cannot read roster"):
        read_roster(tmp_path / "missing.csv")


# -- assign: bad input writes nothing --

def test_assign_bad_input_is_one_line_and_writes_nothing(files, capsys):
    tmp, src = files
    out = tmp / "release"
    dup = tmp / "dup.csv"
    dup.write_text(ROSTER + "alice,A,Again,a2@x\n")
    bad = tmp / "bad.secret"
    bad.write_text("hello")
    os.chmod(bad, 0o600)   # private, so what is refused is its text
    new_secret = tmp / "new.secret"
    empty = tmp / "empty.csv"
    empty.write_text("id,first_name,last_name,email\n")
    cases = [(["--roster", str(tmp / "roster.csv")], "give --roster CSV and --secret FILE"),
             (["--secret", str(tmp / "course.secret")], "give --roster CSV and --secret FILE"),
             (["--roster", str(dup), "--secret", str(new_secret)], "listed twice"),
             (["--roster", str(empty), "--secret", str(new_secret)], "lists no students"),
             (["--roster", str(tmp / "none.csv"), "--secret", str(new_secret)],
              "cannot read roster"),
             (["--roster", str(tmp / "roster.csv"), "--secret", str(bad)],
              "is not a secret gpumemlab wrote")]
    for extra, message in cases:
        assert main(["assign", str(src), str(out), "--no-check"] + extra) == 2, extra
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not out.exists() and not new_secret.exists()
    assert sorted(p.name for p in tmp.iterdir()) == ["bad.secret", "course.secret", "dup.csv",
                                                      "empty.csv", "roster.csv", "teacher"]


def test_grade_of_a_variant_source_without_secret_is_one_line(files, capsys):
    tmp, src = files
    (tmp / "subs" / "alice").mkdir(parents=True)
    assert main(["grade", str(tmp / "subs"), "--source", str(src), "--out",
                 str(tmp / "g" / "grades.csv")]) == 2
    err = capsys.readouterr().err
    assert "grade with --secret FILE" in err and err.count("\n") == 1
    assert main(["grade", str(tmp / "subs"), "--source", str(src), "--out",
                 str(tmp / "g" / "grades.csv"), "--roster", str(tmp / "roster.csv"),
                 "--secret", str(tmp / "nope.secret")]) == 2
    assert "cannot read the course secret" in capsys.readouterr().err
    assert not (tmp / "g").exists()


def test_assign_creates_the_secret_and_gives_each_student_their_own_numbers(files, capsys):
    tmp, src = files
    secret = tmp / "fresh.secret"
    out = tmp / "release"
    assert main(["assign", str(src), str(out), "--no-check", "--roster", str(tmp / "roster.csv"),
                 "--secret", str(secret)]) == 0
    printed = capsys.readouterr().out
    assert f"created the course secret {secret}" in printed and "keep it private" in printed
    assert stat.S_IMODE(os.stat(secret).st_mode) == 0o600
    assert sorted(p.name for p in out.iterdir()) == ["alice", "bob", "copier"]
    books = {s: nbformat.read(str(out / s / "lab.ipynb"), as_version=4) for s in ("alice", "bob")}
    shown = {s: [c.source for c in nb.cells if "gpumemlab" in c.metadata] for s, nb in
             books.items()}
    assert shown["alice"][0] != shown["bob"][0] and "answer in MiB" in shown["alice"][0]
    assert all("BEGIN SOLUTION" not in str(nb) and "assert_correct" not in str(nb)
               for nb in books.values())
    # the same secret gives the same notebooks again
    again = tmp / "again"
    assert main(["assign", str(src), str(again), "--no-check", "--roster",
                 str(tmp / "roster.csv"), "--secret", str(secret)]) == 0
    assert "created" not in capsys.readouterr().out
    assert (again / "bob" / "lab.ipynb").read_text() == (out / "bob" / "lab.ipynb").read_text()
    assert main(["assign", str(src), str(again), "--no-check", "--roster",
                 str(tmp / "roster.csv"), "--secret", str(secret)]) == 2   # not mixed in
    assert "already exists" in capsys.readouterr().err


def test_a_safe_name_folder_for_odd_ids(files, capsys):
    tmp, src = files
    roster = tmp / "odd.csv"
    roster.write_text("id\nbob smith\n../up\n")
    assert main(["assign", str(src), str(tmp / "r"), "--no-check", "--roster", str(roster),
                 "--secret", str(tmp / "course.secret")]) == 0
    assert sorted(p.name for p in (tmp / "r").iterdir()) == sorted(
        [safe_name("bob smith"), safe_name("../up")])
    assert not (tmp / "up").exists()


# -- the real grader --

@needs_sandbox
def test_assign_check_and_grading_each_student_against_their_own_variant(files, capsys):
    tmp, src = files
    out = tmp / "release"
    assert main(["assign", str(src), str(out), "--roster", str(tmp / "roster.csv"),
                 "--secret", str(tmp / "course.secret"), "--cell-timeout", "30"]) == 0
    printed = capsys.readouterr().out
    assert "the source passes every test (variant questions against the teacher's preview " \
           "variant); the first student's version fails every test" in printed
    books = {s: nbformat.read(str(out / s / "lab.ipynb"), as_version=4)
             for s in ("alice", "bob", "copier")}
    mine = {s: {q: answer_from_notebook(nb, q) for q in ("01.7", "lab.oom")}
            for s, nb in books.items()}
    assert mine["alice"]["01.7"] != mine["copier"]["01.7"]   # else copying would be right
    subs = tmp / "submitted"
    for student, answers in (("alice", mine["alice"]), ("bob", mine["bob"]),
                             ("copier", mine["alice"])):
        nb = answered(books[student], answers)
        (subs / student).mkdir(parents=True)
        nbformat.write(nb, str(subs / student / "lab.ipynb"))
    grades = tmp / "grades" / "grades.csv"
    assert main(["grade", str(subs), "--source", str(src), "--out", str(grades),
                 "--roster", str(tmp / "roster.csv"), "--secret", str(tmp / "course.secret"),
                 "--cell-timeout", "30", "--timeout", "200"]) == 0
    rows = {r["student_id"]: r for r in csv.DictReader(grades.open())}
    assert rows["alice"]["score"] == "2" and rows["bob"]["score"] == "2", rows
    feedback = json.loads((tmp / "grades" / "feedback" / "copier" / "results.json").read_text())
    t0 = next(t for t in feedback["tests"] if t["name"] == "t0")
    assert t0["status"] == "failed" and float(rows["copier"]["score"]) < 2
    seed = student_seed(read_secret(tmp / "course.secret"), "lab", "copier")
    every = "".join(p.read_text() for p in (tmp / "grades").rglob("*") if p.is_file())
    assert seed not in every and SECRET not in every


@needs_sandbox
def test_assign_names_the_preview_answer_when_the_source_is_wrong(files, capsys):
    tmp, src = files
    nb = nbformat.read(str(src), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "a0":
            cell.source = "### BEGIN SOLUTION\nreserved_mib = 12345\n### END SOLUTION"
    nbformat.write(nb, str(src))
    assert main(["assign", str(src), str(tmp / "release"), "--roster", str(tmp / "roster.csv"),
                 "--secret", str(tmp / "course.secret"), "--cell-timeout", "30"]) == 1
    printed = capsys.readouterr().out
    preview = expected(variant_questions(nb)["01.7"][0], PREVIEW_SEED)
    assert "source FAILS its own tests: t0\n" in printed
    assert f"variant 01.7: the source's solution must answer the teacher's preview variant, " \
           f"whose answer is {preview}" in printed
    assert "variant lab.oom: the source's solution" not in printed   # only the failing one
    # lab.oom is a yes/no variant: assign says how often a blind answer gets it
    assert "warning: variant lab.oom: a blind answer" in printed


def test_no_check_does_not_claim_a_check(files, capsys):
    tmp, src = files
    assert main(["assign", str(src), str(tmp / "rel"), "--no-check", "--roster",
                 str(tmp / "roster.csv"), "--secret", str(tmp / "course.secret")]) == 0
    printed = capsys.readouterr().out
    assert "not checked (--no-check)" in printed and "checked:" not in printed


def test_a_device_or_fifo_given_as_the_secret_is_refused_not_read(tmp_path):
    fifo = tmp_path / "course.secret"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):   # open().read would block on the FIFO
        with pytest.raises(VariantError, match="cannot read the course secret .*not a regular"):
            read_secret(path)
