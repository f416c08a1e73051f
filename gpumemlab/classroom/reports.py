"""Write grading results the way teachers' tools read them.

* ``grades.csv``: nbgrader's ``export`` columns, one row per student, in this order:
  assignment, duedate, timestamp, student_id, last_name, first_name, email, raw_score,
  late_submission_penalty, score, max_score.
* ``<feedback>/<student>/results.json``: Gradescope's autograder format
  (``score``, ``execution_time``, ``output``, ``tests[]`` with ``name``, ``score``, ``max_score``,
  ``status``, ``output``).
* ``<feedback>/<student>/feedback.txt``: the same, readable.
* ``<feedback>/<student>/feedback.html``: the same as one self-contained page, with the
  student's own answers (``feedback_page``).

Names and emails come from an optional roster CSV with nbgrader's columns
``id,first_name,last_name,email``.

Every text cell of the CSV is neutralised for spreadsheets: one starting with ``= + - @``, a tab
or a carriage return gets a leading ``'``, so no cell is ever read as a formula. Undecodable
bytes of folder names are written as ``\\xNN``. A test judged only by checks that ran inside the
submission is marked "checked inside the submission"; a run without the OS sandbox says so.

Every text that came from a submission goes through ``cleantext.clean_text`` before it is written
(lone surrogates escaped, terminal escapes and bidi overrides made visible), and a feedback file
is capped at ``FEEDBACK_LIMIT`` characters. Each student's three files are written all or none
(``atomic.write_files``), in their own error boundary: ``write_feedback`` returns the students
whose files failed, and why, and goes on.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from gpumemlab.cleantext import clean_text
from .atomic import write_files
from .feedback_page import feedback_page
from .grade import CSV_COLUMNS, INSIDE_ONLY
from .intake import display_id, safe_name

FEEDBACK_LIMIT = 256 << 10   # characters: every test's output and the notes fit many times over


def read_roster(path) -> dict:
    """{id: row} of a roster CSV; a missing or unreadable file, a header without ``id``, an
    empty id or an id listed twice is a one-line ValueError."""
    if path is None:
        return {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "id" not in reader.fieldnames:
                raise ValueError(f"roster {path} needs a header with an 'id' column "
                                 f"(and first_name, last_name, email)")
            roster = {}
            for row in reader:
                sid = row["id"]
                if not sid:
                    raise ValueError(f"roster {path}, line {reader.line_num}: empty id")
                if sid in roster:
                    raise ValueError(f"roster {path}, line {reader.line_num}: id "
                                     f"{cell_text(sid)!r} is listed twice")
                roster[sid] = row
            return roster
    except OSError as exc:
        raise ValueError(f"cannot read roster {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"roster {path} is not a UTF-8 CSV file "
                         f"({clean_text(str(exc), limit=120, keep_newlines=False)})") from None


def cell_text(value) -> str:
    """A CSV cell a spreadsheet shows as text, never evaluates."""
    text = display_id(str(value))
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def write_csv(results, path, *, assignment: str, duedate: str = "", roster=None) -> None:
    roster = roster or {}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for r in results:
            who = roster.get(r.student_id, {})
            writer.writerow([cell_text(x) for x in (
                assignment, duedate, r.timestamp, r.student_id, who.get("last_name", ""),
                who.get("first_name", ""), who.get("email", ""))] +
                [f"{r.score:g}", f"{r.penalty:g}", f"{r.final_score:g}", f"{r.max_score:g}"])


def _late_lines(result) -> list:
    return [f"late: {result.late_text}"] if result.late_text else []


def gradescope(result) -> dict:
    return {"score": result.final_score,
            "execution_time": round(result.seconds, 2),
            "output": clean_text("\n".join(_late_lines(result) + result.notes),
                                 limit=FEEDBACK_LIMIT),
            "visibility": "visible",
            "tests": [{"name": t["name"], "score": t["score"], "max_score": t["max_score"],
                       "status": t["status"],
                       "output": (f"({INSIDE_ONLY})\n" if t.get("inside_only") else "")
                       + clean_text(t["output"], limit=FEEDBACK_LIMIT)} for t in result.tests]}


def feedback_text(result, assignment: str) -> str:
    lines = [f"{assignment}: feedback for "
             f"{clean_text(display_id(result.student_id), keep_newlines=False)}",
             f"score: {result.final_score:g} / {result.max_score:g}"]
    if result.penalty:
        lines[-1] += f" (raw score {result.score:g}, late penalty {result.penalty:g})"
    lines += _late_lines(result) + [""]
    if not getattr(result, "isolated", True):
        lines[1:1] = ["NOT ISOLATED: graded without the OS sandbox (--no-sandbox)"]
    for t in result.tests:
        mark = "PASS" if t["status"] == "passed" else "FAIL"
        where = f" ({INSIDE_ONLY})" if t.get("inside_only") else ""
        lines.append(f"[{mark}] {t['name']}: {t['score']:g} / {t['max_score']:g}{where}")
        if t["output"]:
            lines += ["    " + line for line in t["output"].splitlines()]
    if result.notes:
        lines += ["", "notes:"] + [f"  - {n}" for n in result.notes]
    return clean_text("\n".join(lines), limit=FEEDBACK_LIMIT) + "\n"


def write_feedback(results, folder, *, assignment: str) -> list:
    """Write every student's files; -> [(student_id, why)] for the students whose files could
    not be written (the others are written all the same)."""
    folder = Path(folder)
    failed = []
    for r in results:
        try:   # all three rendered, then written all or none: no student gets half a set
            d = folder / safe_name(r.student_id)
            write_files({d / "results.json": json.dumps(gradescope(r), indent=1),
                         d / "feedback.txt": feedback_text(r, assignment),
                         d / "feedback.html": feedback_page(r, assignment,
                                                            limit=FEEDBACK_LIMIT)})
        except Exception as exc:   # one student's files must not stop the others'
            failed.append((r.student_id, clean_text(f"{type(exc).__name__}: {exc}", limit=200,
                                                    keep_newlines=False)))
    return failed
