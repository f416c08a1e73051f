"""Late times that cannot be moved (issue 34): nbgrader's ``timestamp.txt`` is read before any
copy limit, its named zones are read, a time that does not parse is refused in one line (the
file time never stands in for it), and the file-time stand-in is always said."""
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpumemlab.classroom import late
from gpumemlab.classroom.intake import COPY_LIMIT_FILES, copy_submission, read_timestamp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixtures" / "classroom"))
import make_submissions as M  # noqa: E402

DUE = datetime(2026, 12, 1, 17, 0, tzinfo=timezone.utc)
POLICY = late.LatePolicy(due=DUE, per_day=0.1)


@pytest.mark.parametrize("text, utc", [
    ("2026-12-01 16:00:00.123456 EST", datetime(2026, 12, 1, 21, 0, 0, 123456)),
    ("2026-07-01 09:30:00.000001 PDT", datetime(2026, 7, 1, 16, 30, 0, 1)),
    ("2026-12-01 18:00:00 CET", datetime(2026, 12, 1, 17, 0)),
    ("2026-12-01 16:00:00.5 UTC", datetime(2026, 12, 1, 16, 0, 0, 500000)),
])
def test_nbgraders_named_zones_are_read(text, utc):
    assert late.parse_time(text) == utc.replace(tzinfo=timezone.utc)


@pytest.mark.parametrize("text", ["2026-12-01 16:00:00 IST", "2026-12-01 16:00:00 XYZT",
                                  "2026-12-01 16:00:00+01:00 EST", "yesterday"])
def test_a_zone_or_time_it_cannot_read_is_refused_in_one_line(text):
    with pytest.raises(ValueError) as info:
        late.parse_time(text, "timestamp.txt")
    assert "\n" not in str(info.value) and "timestamp.txt" in str(info.value)


def test_an_unparseable_timestamp_is_not_replaced_by_the_file_time(tmp_path):
    nb = tmp_path / "lab.ipynb"
    nb.write_text("{}")
    os.utime(nb, (0, 0))   # 1970: on time, were the file time used
    when, note = late.submission_time("2026-12-04 10:00:00 XYZT", nb)
    assert when is None and "XYZT" in note and "teacher decides" in note


def test_the_file_time_stand_in_is_said_even_when_on_time(tmp_path):
    nb = tmp_path / "lab.ipynb"
    nb.write_text("{}")
    stamp = DUE.timestamp() - 3600
    os.utime(nb, (stamp, stamp))

    class Result:
        timestamp, score, max_score, penalty, late_text = "", 5.0, 5.0, 0.0, ""
    res = late.apply_late(Result(), POLICY, nb)
    assert res.penalty == 0 and late.MTIME_NOTE in res.late_text


def test_many_files_in_front_do_not_push_the_timestamp_out(tmp_path):
    src = tmp_path / "submitted"
    src.mkdir()
    for i in range(COPY_LIMIT_FILES + 20):   # sorted before timestamp.txt
        (src / f"a{i:04d}.txt").write_text("x")
    late_by = DUE + timedelta(days=2, hours=17)
    (src / "timestamp.txt").write_text(late_by.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    copy_submission(src, tmp_path / "copy")
    assert not (tmp_path / "copy" / "timestamp.txt").exists()   # the limit left it out
    assert late.parse_time(read_timestamp(src)) == late_by      # read from the submission


def test_grade_one_reads_the_timestamp_from_the_submission(tmp_path):
    from gpumemlab.classroom import grade

    src = tmp_path / "alice"
    src.mkdir()
    for i in range(COPY_LIMIT_FILES):
        (src / f"a{i:04d}.txt").write_text("x")
    (src / "timestamp.txt").write_text("2026-12-04 10:00:00.000000 EST")
    # no notebook: nothing runs, as root either (allow_root: the kit's Python may be under /root)
    run = grade.open_run(grade.read_notebook(M.SOURCE), sandbox=False, allow_root=True)
    try:
        res = grade.grade_one(run, "alice", src, None)
    finally:
        run.close()
    assert res.timestamp == "2026-12-04 10:00:00.000000 EST"
    res = late.apply_late(res, POLICY, None)
    assert res.late_text.startswith("submitted 2026-12-04")
