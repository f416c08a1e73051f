"""Late policy: parsing untrusted times, the penalty rule, and where the penalty is written."""
import csv
import os
from datetime import datetime, timedelta, timezone

import pytest

from gpumemlab.classroom import late as L
from gpumemlab.classroom.grade import StudentResult
from gpumemlab.classroom.late import apply_late
from gpumemlab.classroom.reports import feedback_text, gradescope, write_csv
from gpumemlab.cli import main

UTC = timezone.utc


@pytest.mark.parametrize("text, expected", [
    ("2026-12-01T17:00:00+01:00", datetime(2026, 12, 1, 16, 0, tzinfo=UTC)),
    ("2026-12-01 16:00", datetime(2026, 12, 1, 16, 0, tzinfo=UTC)),
    ("2026-12-01 16:00:00.250000 UTC", datetime(2026, 12, 1, 16, 0, 0, 250000, tzinfo=UTC)),
    ("2026-12-01T16:00:00Z", datetime(2026, 12, 1, 16, 0, tzinfo=UTC)),
    ("2018-07-01T14:22:32.365935-07:00", datetime(2018, 7, 1, 21, 22, 32, 365935, tzinfo=UTC)),
])
def test_times_parse_to_the_same_instant(text, expected):
    assert L.parse_time(text) == expected


def test_a_date_alone_is_due_at_the_end_of_that_day():
    assert L.parse_due("2026-12-01") == datetime(2026, 12, 1, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "", "x" * 200, "2026-12-01\x1b[2J",
                                  "2026-12-01T10:00+02:00 UTC", None, 17])
def test_bad_times_are_one_line_errors(text):
    with pytest.raises(ValueError) as err:
        L.parse_due(text)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


@pytest.mark.parametrize("per_day, cap, grace, message", [
    ("ten", None, None, "not a fraction"), ("150%", None, None, "between 0 and 1"),
    (None, "-0.1", None, "between 0 and 1"), ("nan", None, None, "between 0 and 1"),
    (None, None, "soon", "not a duration"), (None, None, "400d", "between 0 and 365 days")])
def test_bad_policy_numbers_are_refused(per_day, cap, grace, message):
    with pytest.raises(ValueError, match=message):
        L.policy_from_args("2026-12-01", per_day, cap, grace)


def test_a_policy_without_a_due_date_is_refused():
    with pytest.raises(ValueError, match="needs a due date"):
        L.policy_from_args(None, "10%")
    assert L.policy_from_args(None) is None


def test_penalty_per_started_day_after_grace_capped_and_never_below_zero():
    policy = L.policy_from_args("2026-12-01T12:00:00Z", "10%", "0.25", "15m")
    due = policy.due
    on_time = L.late_penalty(policy, due - timedelta(hours=3), 8, 10)
    assert (on_time.penalty, on_time.text) == (0.0, "")
    grace = L.late_penalty(policy, due + timedelta(minutes=10), 8, 10)
    assert grace.penalty == 0 and "grace" in grace.text
    # 16 minutes late: past the grace, one started day, 10 % of 10 points
    one = L.late_penalty(policy, due + timedelta(minutes=16), 8, 10)
    assert (one.days, one.penalty) == (1, 1.0)
    # 2 days and a second: three started days, 30 % capped at 25 %
    three = L.late_penalty(policy, due + timedelta(days=2, seconds=1), 8, 10)
    assert (three.days, three.penalty) == (3, 2.5) and "25%" in three.text
    # the penalty never takes more than the raw score
    assert L.late_penalty(policy, due + timedelta(days=9), 1, 10).penalty == 1
    # no submission time: no penalty, and the feedback says so
    unknown = L.late_penalty(policy, None, 8, 10)
    assert unknown.penalty == 0 and "no submission time" in unknown.text


def _result(student, score=8.0, stamp=""):
    return StudentResult(student, [{"name": "t1", "score": score, "max_score": 10.0,
                                    "status": "passed", "output": ""}], score, 10.0, 1.0, stamp)


def test_penalty_reaches_the_csv_the_feedback_and_results_json(tmp_path):
    policy = L.policy_from_args("2026-12-01", "0.1")
    late = apply_late(_result("late", stamp="2026-12-03 08:00:00 UTC"), policy)
    on_time = apply_late(_result("ontime", stamp="2026-12-01T09:00:00Z"), policy)
    assert (late.penalty, on_time.penalty) == (2.0, 0.0)
    out = tmp_path / "grades.csv"
    write_csv([late, on_time], out, assignment="lab", duedate=L.format_time(policy.due))
    rows = {r["student_id"]: r for r in csv.DictReader(out.open())}
    assert (rows["late"]["raw_score"], rows["late"]["late_submission_penalty"],
            rows["late"]["score"]) == ("8", "2", "6")
    assert rows["ontime"]["score"] == "8" and rows["late"]["duedate"] == "2026-12-01 23:59:59 UTC"
    text = feedback_text(late, "lab")
    assert "score: 6 / 10 (raw score 8, late penalty 2)" in text and "2 days late" in text
    gs = gradescope(late)
    assert gs["score"] == 6 and "2 days late" in gs["output"]


def test_without_a_timestamp_the_notebook_files_time_is_used(tmp_path):
    nb = tmp_path / "lab.ipynb"
    nb.write_text("{}")
    when = datetime(2026, 12, 5, 12, 0, tzinfo=UTC).timestamp()
    os.utime(nb, (when, when))
    policy = L.policy_from_args("2026-12-01", "10%")
    result = apply_late(_result("s"), policy, nb)
    assert result.penalty == 4.0 and "modification time" in result.late_text
    broken = apply_late(_result("t", stamp="soon"), policy, nb)
    assert "timestamp.txt 'soon' is not an ISO 8601" in broken.late_text


def test_the_source_may_carry_the_policy_and_bad_metadata_is_named():
    assert L.policy_from_metadata({"gpumemlab": {"late": {"due": "2026-12-01"}}}) == \
        {"due": "2026-12-01"}
    with pytest.raises(ValueError, match="unknown keys: penalty"):
        L.policy_from_metadata({"gpumemlab": {"late": {"penalty": 1}}})


def test_grade_refuses_a_bad_due_date_before_grading_and_writes_nothing(tmp_path, capsys):
    from pathlib import Path

    source = Path(__file__).parents[1] / "fixtures" / "classroom" / "source" / "lab.ipynb"
    (tmp_path / "subs" / "a").mkdir(parents=True)
    out = tmp_path / "out" / "grades.csv"
    for extra, message in ((["--duedate", "next friday"], "is not an ISO 8601"),
                           (["--late-per-day", "10%"], "needs a due date"),
                           (["--duedate", "2026-12-01", "--grace", "soon"], "not a duration")):
        status = main(["grade", str(tmp_path / "subs"), "--source", str(source), "--out",
                       str(out)] + extra)
        err = capsys.readouterr().err.strip()
        assert status == 2 and message in err and len(err.splitlines()) == 1
        assert not out.parent.exists()
