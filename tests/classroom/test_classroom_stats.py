"""Item statistics (``gpumemlab stats``): known answers computed independently with the standard
library, each warning, the CLI round trip, bad input, and items.csv from a real grading run."""
import base64
import csv
import math
import re
import statistics
from pathlib import Path

import pytest

from gpumemlab.cli import main
from gpumemlab.classroom.answers import answer_text, short_json
from gpumemlab.classroom.stats.measures import Response, item_stats, pearson
from gpumemlab.classroom.stats.items import items_text
from gpumemlab.classroom.stats.plot import plot_png

# A hand-built class: 8 students, 4 questions worth 1 point, a 2-point one with partial credit.
STUDENTS = ["ann", "bob", "cat", "dan", "eve", "fay", "gus", "hal"]
CLASS = {   # question -> scores in STUDENTS' order
    "q1": [1, 1, 1, 1, 1, 0, 1, 0],
    "q2": [1, 1, 1, 0, 0, 1, 0, 0],
    "q3": [1, 1, 0, 1, 0, 0, 0, 0],
    "q4": [0, 0, 1, 0, 1, 1, 1, 1],     # the weaker students get it: negative
    "q5": [2, 2, 1, 1, 0, 2, 1, 0],     # out of 2
}
MAX = {"q1": 1, "q2": 1, "q3": 1, "q4": 1, "q5": 2}
WRONG = {("q2", "dan"): "2", ("q2", "eve"): "2", ("q2", "gus"): "20.0", ("q2", "hal"): "-2",
         ("q3", "cat"): '"x"', ("q3", "eve"): '"x"', ("q3", "fay"): '"y"', ("q3", "gus"): '"z"',
         ("q3", "hal"): '"w"'}
RIGHT = {"q2": "20", "q3": '"v"'}


def class_responses():
    return [Response(s, q, float(scores[k]), float(MAX[q]),
                     WRONG.get((q, s), RIGHT.get(q, "")) if scores[k] < MAX[q]
                     else RIGHT.get(q, ""))
            for q, scores in CLASS.items() for k, s in enumerate(STUDENTS)]


def by_item(stats):
    return {st.item: st for st in stats.items}


def test_discrimination_is_the_correlation_with_the_rest_of_the_score():
    stats = by_item(item_stats(class_responses()))
    totals = [sum(CLASS[q][k] for q in CLASS) for k in range(len(STUDENTS))]
    for q, scores in CLASS.items():
        rest = [t - x for t, x in zip(totals, scores)]
        assert stats[q].discrimination == pytest.approx(statistics.correlation(scores, rest),
                                                        abs=1e-12), q
    assert stats["q4"].discrimination < 0 < stats["q3"].discrimination


def test_point_biserial_by_its_own_formula():
    # r_pb = (M1 - M0) / s_n * sqrt(p q) with the population standard deviation of the rest
    stats = by_item(item_stats(class_responses()))
    totals = [sum(CLASS[q][k] for q in CLASS) for k in range(len(STUDENTS))]
    x = CLASS["q2"]
    rest = [t - v for t, v in zip(totals, x)]
    m1 = statistics.mean(r for r, v in zip(rest, x) if v)
    m0 = statistics.mean(r for r, v in zip(rest, x) if not v)
    p = sum(x) / len(x)
    expected = (m1 - m0) / statistics.pstdev(rest) * math.sqrt(p * (1 - p))
    assert stats["q2"].discrimination == pytest.approx(expected, abs=1e-12)


def test_difficulty_is_the_mean_share_of_the_points():
    stats = by_item(item_stats(class_responses()))
    assert stats["q1"].difficulty == pytest.approx(6 / 8)
    assert stats["q3"].difficulty == pytest.approx(3 / 8)
    # partial credit: 2,2,1,1,0,2,1,0 out of 2 -> (1+1+.5+.5+0+1+.5+0)/8
    assert stats["q5"].difficulty == pytest.approx(4.5 / 8)
    assert stats["q5"].mean_score == pytest.approx(9 / 8)


def test_most_common_wrong_answers_top_three_with_counts():
    stats = by_item(item_stats(class_responses()))
    assert stats["q2"].wrong_answers == [("2", 2), ("-2", 1), ("20.0", 1)]
    # five wrong answers: the most common first, ties in text order, the fourth left out
    assert stats["q3"].wrong_answers == [('"x"', 2), ('"w"', 1), ('"y"', 1)]
    assert stats["q1"].wrong_answers == []          # no answers recorded (a function answer)


def test_no_warning_for_a_question_that_separates_well():
    stats = by_item(item_stats(class_responses()))
    assert stats["q3"].warnings == []


def test_warning_negative_discrimination():
    warnings = by_item(item_stats(class_responses()))["q4"].warnings
    assert len(warnings) == 1 and warnings[0].startswith("negative discrimination (r = -")


def _stats_of(columns):
    """Statistics of a class given as {item: [scores]} (1 point each)."""
    n = len(next(iter(columns.values())))
    return by_item(item_stats([Response(f"s{k}", q, float(v[k]), 1.0)
                               for q, v in columns.items() for k in range(n)]))


def test_warning_everyone_got_it_right_and_discrimination_undefined():
    st = _stats_of({"easy": [1, 1, 1, 1], "other": [1, 0, 1, 0]})["easy"]
    assert st.difficulty == 1 and st.discrimination is None
    assert st.warnings == ["everyone got it right: it cannot tell who understood",
                           "discrimination undefined: every student scored the same on it"]


def test_warning_no_one_got_it():
    st = _stats_of({"hard": [0, 0, 0, 0], "other": [1, 0, 1, 0]})["hard"]
    assert st.difficulty == 0 and st.discrimination is None
    assert st.warnings[0].startswith("no one got it")


def test_undefined_when_the_rest_score_does_not_vary():
    # the rest of "a" is "b", and everyone scored 1 on "b"
    st = _stats_of({"a": [1, 0, 1, 0], "b": [1, 1, 1, 1]})["a"]
    assert st.discrimination is None
    assert st.warnings == ["discrimination undefined: the rest of the score is the same for "
                           "every student"]


def test_warning_weak_discrimination():
    # 20 students; "b" right for 6 of the 10 who got "a" and 5 of the 10 who did not:
    # phi = (6*5 - 4*5) / sqrt(10*10*11*9) = 0.1005
    a = [1] * 10 + [0] * 10
    b = [1] * 6 + [0] * 4 + [1] * 5 + [0] * 5
    r = statistics.correlation(a, b)
    assert r == pytest.approx(10 / math.sqrt(9900))
    st = _stats_of({"a": a, "b": b})["a"]
    assert st.discrimination == pytest.approx(r)
    assert st.warnings == ["weak discrimination (r = 0.10 < 0.20): it barely separates "
                           "students who did well on the rest from those who did not"]


def test_pearson_is_undefined_not_nan():
    assert pearson([1, 1, 1], [1, 2, 3]) is None
    assert pearson([1, 2, 3], [5, 5, 5]) is None
    assert pearson([1], [2]) is None
    assert pearson([0, 1, 2], [2, 1, 0]) == pytest.approx(-1)


def test_a_student_without_a_row_scored_zero():
    rs = [Response("a", "q", 1.0, 1.0), Response("b", "q", 1.0, 1.0),
          Response("a", "r", 1.0, 1.0)]
    st = by_item(item_stats(rs, ["a", "b", "c"]))
    assert (st["q"].n, st["q"].missing, st["q"].difficulty) == (3, 1, pytest.approx(2 / 3))
    assert (st["r"].missing, st["r"].difficulty) == (2, pytest.approx(1 / 3))


# --- answers recorded by the grader --------------------------------------------------------

def test_answer_text_shows_plain_answers_only():
    plain = {"question": "01.2", "name": "x", "probes": None}
    func = {"question": "01.5", "name": "f", "probes": [[1]]}
    assert answer_text([plain], [{"ok": True, "value": 20}]) == "20"
    assert answer_text([plain], [{"ok": True, "value": None}]) == "null"
    assert answer_text([func], [{"ok": True, "calls": [{"value": 512}]}]) == ""
    assert answer_text([plain], [{"ok": False, "error": "NameError"}]) == ""
    assert answer_text([plain], None) == ""
    assert answer_text([plain, func, plain], [{"ok": True, "value": [1, 2]}, {"ok": True},
                                               {"ok": True, "value": "a"}]) == '[1, 2]; "a"'


def test_answer_text_is_cleaned_and_short():
    plain = {"question": "q", "name": "x", "probes": None}
    long = answer_text([plain], [{"ok": True, "value": "A" * 10_000}])
    assert len(long) == 80 and long.endswith("...")
    shown = short_json("\x1b[2Jfake\u202e")
    assert "\x1b" not in shown and "\u202e" not in shown and "\\u202e" in shown


def test_items_csv_neutralises_cells_and_stats_reads_them_back(tmp_path):
    class R:
        student_id, timestamp = "=cmd", ""
        tests = [{"name": "q", "score": 0.0, "max_score": 1.0, "status": "failed",
                  "answer": "-2"}]
    text = items_text([R()], "lab")
    row = list(csv.reader(text.splitlines()))[1]
    assert row == ["lab", "'=cmd", "q", "0", "1", "failed", "'-2"]
    (tmp_path / "items.csv").write_text(text)
    (tmp_path / "grades.csv").write_text("assignment,student_id,raw_score,max_score\n"
                                         "lab,'=cmd,0,1\n")
    from gpumemlab.classroom.stats.reading import read_grades, read_items

    responses, students = read_items(tmp_path / "items.csv", read_grades(tmp_path / "grades.csv"))
    assert responses[0].answer == "-2" and students == ["'=cmd"]


# --- the command ---------------------------------------------------------------------------

def write_class(folder: Path, *, items=True):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "grades.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["assignment", "duedate", "timestamp", "student_id", "last_name",
                    "first_name", "email", "raw_score", "late_submission_penalty", "score",
                    "max_score"])
        for k, s in enumerate(STUDENTS):
            total = sum(CLASS[q][k] for q in CLASS)
            w.writerow(["lab", "", "", s, "", "", "", total, 1, total - 1, 6])
    if items:
        with open(folder / "items.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["assignment", "student_id", "question", "score", "max_score", "status",
                        "answer"])
            for r in class_responses():
                w.writerow(["lab", r.student, r.item, f"{r.score:g}", f"{r.max_score:g}",
                            "passed" if r.score == r.max_score else "failed", r.answer])


def test_stats_round_trip_writes_csv_and_html(tmp_path, capsys):
    write_class(tmp_path / "class")
    out = tmp_path / "report"
    assert main(["stats", str(tmp_path / "class" / "grades.csv"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "5 questions, 8 students" in printed and "q4: negative discrimination" in printed
    rows = {r["item"]: r for r in csv.DictReader((out / "stats.csv").open())}
    assert list(rows) == ["q1", "q2", "q3", "q4", "q5"]
    expected = by_item(item_stats(class_responses()))
    for q, st in expected.items():
        assert float(rows[q]["difficulty"]) == pytest.approx(st.difficulty, abs=0.0005)
        assert float(rows[q]["discrimination"]) == pytest.approx(st.discrimination, abs=0.0005)
    assert rows["q2"]["common_wrong_answers"] == "2 (x2); -2 (x1); 20.0 (x1)"
    assert rows["q4"]["warnings"].startswith("negative discrimination")
    page = (out / "stats.html").read_text()
    png = base64.b64decode(re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert red_pixels(png) > red_pixels(plot_png(quiet(expected))) + 50   # q1, q4 red
    text = page.replace(re.search(r"base64,([A-Za-z0-9+/=]+)", page)[1], "")
    assert "<script" not in text and "http" not in text and "nan" not in text.lower()
    assert "q4: negative discrimination (r = -0.75)" in text


def red_pixels(png: bytes) -> int:
    import io

    from matplotlib.image import imread
    pixels = imread(io.BytesIO(png), format="png")
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500
    return int(((pixels[..., 0] > 0.7) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)).sum())


def quiet(by_name):
    """The same statistics with no warnings: every defined item drawn blue."""
    import dataclasses

    from gpumemlab.classroom.stats.measures import ClassStats
    return ClassStats([dataclasses.replace(st, warnings=[]) for st in by_name.values()], 8)


def test_stats_escapes_names_and_never_prints_nan(tmp_path, capsys):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "grades.csv").write_text(
        "assignment,student_id,raw_score,max_score\n"
        "<b>lab</b>,a,1,1\n<b>lab</b>,b,1,1\n=HYPERLINK(1),a,0,1\n=HYPERLINK(1),b,1,1\n")
    assert main(["stats", str(folder / "grades.csv")]) == 0
    printed = capsys.readouterr().out
    page = (folder / "stats.html").read_text()
    assert "<b>lab" not in page and "&lt;b&gt;lab&lt;/b&gt;" in page
    assert "undefined" in printed and "nan" not in printed.lower()
    rows = list(csv.reader((folder / "stats.csv").open()))
    assert rows[2][0] == "'=HYPERLINK(1)" and rows[1][6] == "undefined"


def test_grades_alone_makes_the_assignments_the_items(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    raw = {"lab1": [3, 2, 2, 0, 1], "lab2": [5, 4, 1, 2, 0], "lab3": [1, 2, 2, 2, 0]}
    lines = ["assignment,student_id,raw_score,late_submission_penalty,score,max_score"]
    lines += [f"{a},s{k},{v},1,{max(v - 1, 0)},5" for a, vs in raw.items()
              for k, v in enumerate(vs)]
    (folder / "grades.csv").write_text("\n".join(lines) + "\n")
    assert main(["stats", str(folder / "grades.csv")]) == 0
    rows = {r["item"]: r for r in csv.DictReader((folder / "stats.csv").open())}
    totals = [sum(vs[k] for vs in raw.values()) for k in range(5)]
    for a, vs in raw.items():   # raw_score, not the late-penalised score
        assert float(rows[a]["difficulty"]) == pytest.approx(sum(vs) / 25, abs=0.0005)
        r = statistics.correlation(vs, [t - v for t, v in zip(totals, vs)])
        assert float(rows[a]["discrimination"]) == pytest.approx(r, abs=0.0005)


def test_items_of_several_assignments_are_named_with_their_assignment(tmp_path):
    (tmp_path / "grades.csv").write_text("assignment,student_id,raw_score,max_score\n"
                                         "lab1,a,1,2\nlab1,b,2,2\nlab2,a,0,1\nlab2,b,1,1\n")
    (tmp_path / "items.csv").write_text(
        "assignment,student_id,question,score,max_score,answer\n"
        "lab1,a,q,1,1,\nlab1,a,r,0,1,5\nlab1,b,q,1,1,\nlab1,b,r,1,1,\n"
        "lab2,a,q,0,1,7\nlab2,b,q,1,1,\n")
    assert main(["stats", str(tmp_path / "grades.csv")]) == 0
    rows = {r["item"]: r for r in csv.DictReader((tmp_path / "stats.csv").open())}
    assert list(rows) == ["lab1/q", "lab1/r", "lab2/q"]
    assert rows["lab2/q"]["common_wrong_answers"] == "7 (x1)"
    assert rows["lab1/q"]["warnings"].startswith("everyone got it right")


def _one_error(capsys):
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpumemlab stats: error: ") and "\n" not in err, err
    return err


BAD_GRADES = {
    "empty": ("", "is empty"),
    "no_columns": ("name,points\nann,3\n", "has no student_id, assignment, max_score columns"),
    "header_only": ("assignment,student_id,raw_score,max_score\n", "has a header but no rows"),
    "not_a_number": ("assignment,student_id,raw_score,max_score\nlab,ann,three,5\n",
                     "line 2: raw_score 'three' is not a number"),
    "nan": ("assignment,student_id,raw_score,max_score\nlab,ann,nan,5\n", "is not a number"),
    "twice": ("assignment,student_id,raw_score,max_score\nlab,ann,1,5\nlab,ann,2,5\n",
              "listed twice"),
    "negative_max": ("assignment,student_id,raw_score,max_score\nlab,ann,1,-5\n", "negative"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRADES))
def test_bad_grades_one_line_and_nothing_written(tmp_path, capsys, case):
    text, message = BAD_GRADES[case]
    (tmp_path / "grades.csv").write_text(text)
    assert main(["stats", str(tmp_path / "grades.csv")]) == 2
    assert message in _one_error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grades.csv"]


def test_grades_that_are_not_utf8(tmp_path, capsys):
    (tmp_path / "grades.csv").write_bytes(b"assignment,student_id\n\xff\xfe,\x80\n")
    assert main(["stats", str(tmp_path / "grades.csv")]) == 2
    assert "not UTF-8" in _one_error(capsys)


@pytest.mark.parametrize("change,message", [
    (lambda t: t.replace("lab,hal,", "lab,zed,"), "student zed of lab is not in the grades"),
    (lambda t: t.replace("lab,ann,q1,1,", "lab,ann,q1,0,"), "ann's questions of lab add up to 4, the grades say 5"),
    (lambda t: t.replace("lab,", "lab2,"), "is not in the grades"),
    (lambda t: t.replace("score,max_score", "points,max_score"), "has no score column"),
    (lambda t: t.replace("lab,bob,q2,1,1", "lab,bob,q2,1,2"), "q2 is out of 1 for one student"),
])
def test_items_that_do_not_match_the_grades(tmp_path, capsys, change, message):
    write_class(tmp_path)
    items = tmp_path / "items.csv"
    items.write_text(change(items.read_text()))
    assert main(["stats", str(tmp_path / "grades.csv"), "--out", str(tmp_path / "o")]) == 2
    assert message in _one_error(capsys)
    assert not (tmp_path / "o").exists()


def test_missing_files_are_one_line_errors(tmp_path, capsys):
    assert main(["stats", str(tmp_path / "nope.csv")]) == 2
    assert "does not exist" in _one_error(capsys)
    write_class(tmp_path, items=False)
    assert main(["stats", str(tmp_path / "grades.csv"), "--items", str(tmp_path / "x.csv")]) == 2
    assert "items file" in _one_error(capsys)


def test_a_failed_write_leaves_the_old_files_and_no_temporary(tmp_path, capsys):
    write_class(tmp_path)
    out = tmp_path / "o"
    out.mkdir()
    (out / "stats.csv").write_text("old")
    (out / "stats.html").mkdir()      # cannot be replaced by a file
    assert main(["stats", str(tmp_path / "grades.csv"), "--out", str(out)]) == 2
    assert "stats.html" in _one_error(capsys)
    assert (out / "stats.csv").read_text() == "old"
    assert sorted(p.name for p in out.iterdir()) == ["stats.csv", "stats.html"]


# --- a real grading run ----------------------------------------------------------------------

def test_grade_writes_items_csv_with_the_judged_answers(tmp_path, capsys):
    nbformat = pytest.importorskip("nbformat")
    from gpumemlab.classroom import isolation
    from gpumemlab.classroom.build import student_version

    if isolation.unavailable_reason() is not None:
        pytest.skip(f"no OS sandbox here ({isolation.unavailable_reason()})")
    import make_submissions as M

    student = student_version(nbformat.read(str(M.SOURCE), as_version=4))
    subs = tmp_path / "submitted"
    for name, answers in (("right", M.RIGHT), ("wrong", M.WRONG)):
        (subs / name).mkdir(parents=True)
        nbformat.write(M.answered(student, answers), str(subs / name / "lab.ipynb"))
    out = tmp_path / "out" / "grades.csv"
    assert main(["grade", str(subs), "--source", str(M.SOURCE), "--out", str(out),
                 "--cell-timeout", "20", "--timeout", "120"]) == 0
    rows = {(r["student_id"], r["question"]): r
            for r in csv.DictReader((out.parent / "items.csv").open())}
    assert set(rows) == {(s, q) for s in ("right", "wrong")
                         for q in ("round-size-test", "reserved-test", "frag-test")}
    assert (rows["right", "reserved-test"]["answer"], rows["right", "reserved-test"]["status"],
            rows["right", "reserved-test"]["score"]) == ("20", "passed", "1")
    assert (rows["wrong", "reserved-test"]["answer"],
            rows["wrong", "reserved-test"]["status"]) == ("2", "failed")
    # function answers have no single value to show
    assert rows["right", "round-size-test"]["answer"] == rows["wrong", "frag-test"]["answer"] == ""
    capsys.readouterr()
    assert main(["stats", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "3 questions, 2 students" in printed
    assert re.search(r"reserved-test\s+2\s+0\.50\s+1\.00\s+2 \(x1\)", printed), printed


def test_a_device_or_fifo_given_as_grades_is_refused_not_read(tmp_path):
    import os

    from gpumemlab.classroom.stats.reading import StatsInputError, read_grades

    fifo = tmp_path / "grades.csv"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):   # read_bytes would block on one and never end on the other
        with pytest.raises(StatsInputError, match="not a regular file"):
            read_grades(path)
