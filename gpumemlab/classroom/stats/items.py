"""``items.csv``: one row per student per question of a grading run, for item statistics.

Columns: assignment, student_id, question (the test's grade_id), score, max_score, status
(passed/failed) and answer (the judged plain answer as short cleaned text, "" for a function
answer or none; ``answers``). Every cell goes through ``reports.cell_text`` so that no
spreadsheet reads one as a formula. ``gpumemlab stats`` reads the file back (``reading``).
"""
from __future__ import annotations

import csv
import io

from ..atomic import write_files
from ..reports import cell_text

ITEM_COLUMNS = ["assignment", "student_id", "question", "score", "max_score", "status",
                "answer"]


def items_text(results, assignment: str) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(ITEM_COLUMNS)
    for r in results:
        for t in r.tests:
            writer.writerow([cell_text(x) for x in (assignment, r.student_id, t["name"])] +
                            [f"{t['score']:g}", f"{t['max_score']:g}"] +
                            [cell_text(x) for x in (t["status"], t.get("answer", ""))])
    return out.getvalue()


def write_items(results, path, *, assignment: str) -> None:
    """Write ``items.csv`` at ``path`` (all of it, or nothing: ``atomic``)."""
    write_files({path: items_text(results, assignment)})
