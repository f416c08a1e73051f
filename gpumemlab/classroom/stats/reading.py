"""Read ``grades.csv`` and ``items.csv`` for item statistics, refusing anything that would give
wrong figures.

Either file is the teacher's, but it may have passed through a spreadsheet or another tool: every
problem is a ``StatsInputError`` with one line that names the file and, where there is one, the
line (an empty file, a missing column, a score that is not a finite number, a negative
max_score, a student listed twice, a question whose max_score changes, an ``items.csv`` from
another grading run). Nothing is computed until both files have been read whole.

* ``grades.csv`` (nbgrader's export columns): student_id, assignment, max_score and raw_score,
  or score where there is no raw_score column. raw_score comes first because a late penalty says
  when a student handed in, not what they understood.
* ``items.csv`` (``items``): assignment, student_id, question, score, max_score, answer. It
  matches the grades when every (assignment, student) it lists is in ``grades.csv`` and each
  student's questions add up to their raw_score there.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from gpumemlab.cleantext import clean_text
from .measures import Response

GRADES_NEED = ("student_id", "assignment", "max_score")
ITEMS_NEED = ("assignment", "student_id", "question", "score", "max_score")
FILE_LIMIT = 64 << 20      # bytes: a class of thousands fits many times over


class StatsInputError(ValueError):
    """A grades or items file that cannot give honest statistics; the message is one line."""


def _show(text, limit=80) -> str:
    return clean_text(str(text), limit=limit, keep_newlines=False)


def _rows(path: Path, need, label: str):
    """-> (header, [(line number, row dict)]); every required column present."""
    from gpumemlab.recordings.bounded_read import read_regular_file

    # a regular file, never more than the limit: a FIFO or /dev/zero is refused, not read
    data = read_regular_file(str(path), FILE_LIMIT,
                             lambda why: StatsInputError(f"{label} {why}"), f"{label} file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise StatsInputError(f"{label} {_show(path)} is not UTF-8 text") from None
    if not text.strip():
        raise StatsInputError(f"{label} {_show(path)} is empty")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        missing = [c for c in need if c not in header]
        if missing:
            raise StatsInputError(f"{label} {_show(path)} has no {', '.join(missing)} column"
                                  f"{'s' * (len(missing) > 1)} (it needs {', '.join(need)})")
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as exc:
        raise StatsInputError(f"{label} {_show(path)} line {reader.line_num}: "
                              f"{_show(exc)}") from None
    if not rows:
        raise StatsInputError(f"{label} {_show(path)} has a header but no rows")
    return header, rows


def _cell(row, column, where) -> str:
    value = row.get(column)
    if value is None or value.strip() == "":
        raise StatsInputError(f"{where}: no {column}")
    return value.strip()


def _number(row, column, where) -> float:
    text = _cell(row, column, where)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise StatsInputError(f"{where}: {column} {_show(text, 40)!r} is not a number")
    if column == "max_score" and value < 0:
        raise StatsInputError(f"{where}: max_score {text} is negative")
    return value


def _answer(text) -> str:
    """A cell written by ``reports.cell_text``: its leading quote was added for spreadsheets (a
    JSON answer never starts with one)."""
    text = text or ""
    return text[1:] if text[:1] == "'" and text[1:2] in ("=", "+", "-", "@") else text


def read_grades(path) -> list:
    """-> [Response] with the assignment as the item, one per student per assignment."""
    path = Path(path)
    header, rows = _rows(path, GRADES_NEED, "grades")
    scored = "raw_score" if "raw_score" in header else "score"
    if scored not in header:
        raise StatsInputError(f"grades {_show(path)} has no raw_score or score column")
    out, seen = [], {}
    for line, row in rows:
        where = f"grades {_show(path)} line {line}"
        key = (_cell(row, "assignment", where), _cell(row, "student_id", where))
        if key in seen:
            raise StatsInputError(f"{where}: student {_show(key[1])} is listed twice for "
                                  f"{_show(key[0])} (also line {seen[key]})")
        seen[key] = line
        out.append(Response(key[1], key[0], _number(row, scored, where),
                            _number(row, "max_score", where)))
    _same_max(out, f"grades {_show(path)}", "assignment")
    return out


def read_items(path, grades) -> tuple:
    """-> ([Response] per student per question, [student ids]): ``items.csv`` checked against
    the grades read by ``read_grades`` (see the module)."""
    path = Path(path)
    _, rows = _rows(path, ITEMS_NEED, "items")
    out, seen, sums = [], {}, {}
    for line, row in rows:
        where = f"items {_show(path)} line {line}"
        a, s, q = (_cell(row, c, where) for c in ("assignment", "student_id", "question"))
        if (a, s, q) in seen:
            raise StatsInputError(f"{where}: student {_show(s)} has question {_show(q)} twice "
                                  f"(also line {seen[a, s, q]})")
        seen[a, s, q] = line
        r = Response(s, (a, q), _number(row, "score", where), _number(row, "max_score", where),
                     _answer(row.get("answer")))
        out.append(r)
        sums[a, s] = sums.get((a, s), 0.0) + r.score
    _same_max(out, f"items {_show(path)}", "question")
    given = {(r.item, r.student): r.score for r in grades}
    assignments = {a for a, _ in sums}
    for (a, s), total in sums.items():
        if (a, s) not in given:
            raise StatsInputError(f"items {_show(path)} does not match the grades: student "
                                  f"{_show(s)} of {_show(a)} is not in the grades")
    for (a, s), score in given.items():
        # both files write scores with 6 significant digits ({:g})
        if a in assignments and not math.isclose(sums.get((a, s), 0.0), score,
                                                 rel_tol=1e-5, abs_tol=1e-6):
            raise StatsInputError(f"items {_show(path)} does not match the grades: student "
                                  f"{_show(s)}'s questions of {_show(a)} add up to "
                                  f"{sums.get((a, s), 0.0):g}, the grades say {score:g}")
    several = len(assignments) > 1
    named = [Response(r.student, f"{r.item[0]}/{r.item[1]}" if several else r.item[1],
                      r.score, r.max_score, r.answer) for r in out]
    students = list(dict.fromkeys(r.student for r in grades if r.item in assignments))
    return named, students


def _same_max(responses, label, what) -> None:
    first = {}
    for r in responses:
        m = first.setdefault(r.item, r.max_score)
        if m != r.max_score:
            name = r.item[1] if isinstance(r.item, tuple) else r.item
            raise StatsInputError(f"{label}: {what} {_show(name)} is out of {m:g} for one "
                                  f"student and {r.max_score:g} for another")
