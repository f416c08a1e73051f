"""nbgrader's cell conventions, read and applied without nbgrader itself.

A source (instructor) notebook marks cells with ``metadata.nbgrader``:
``{grade_id, solution, grade, points, locked, schema_version: 3}``. ``solution`` cells hold
``### BEGIN SOLUTION`` / ``### END SOLUTION`` regions; test cells (``grade`` and not ``solution``)
may hold ``### BEGIN HIDDEN TESTS`` / ``### END HIDDEN TESTS`` regions. The student version
replaces solutions by a stub and drops hidden tests, as nbgrader's ``generate_assignment`` does.
"""
from __future__ import annotations

import hashlib
import re

BEGIN_SOLUTION, END_SOLUTION = "### BEGIN SOLUTION", "### END SOLUTION"
BEGIN_HIDDEN, END_HIDDEN = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
MARKDOWN_STUB = "YOUR ANSWER HERE"


class NotebookFormatError(ValueError):
    """A source notebook whose nbgrader markup is inconsistent; the message names the cell."""


def meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_id(cell):
    return meta(cell).get("grade_id")


def is_solution(cell) -> bool:
    return bool(meta(cell).get("solution"))


def is_test(cell) -> bool:
    """An autograder test cell: graded, code, not itself an answer."""
    m = meta(cell)
    return bool(m.get("grade")) and not m.get("solution") and cell.get("cell_type") == "code"


def points(cell) -> float:
    return float(meta(cell).get("points", 0) or 0)


def _replace_regions(source: str, begin: str, end: str, replacement, where: str) -> str:
    """Replace every begin..end region (marker lines included) by ``replacement(indent)``."""
    out, inside, indent = [], False, ""
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == begin:
            if inside:
                raise NotebookFormatError(f"{where}: {begin} inside another {begin}")
            inside, indent = True, line[: len(line) - len(line.lstrip())]
            if replacement is not None:
                out += [indent + r for r in replacement.splitlines()]
        elif stripped == end:
            if not inside:
                raise NotebookFormatError(f"{where}: {end} without {begin}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise NotebookFormatError(f"{where}: {begin} without {end}")
    return "\n".join(out)


def student_source(cell, where: str) -> str:
    """The source a student receives for ``cell``."""
    source = cell.get("source", "")
    if is_solution(cell):
        stub = CODE_STUB if cell.get("cell_type") == "code" else MARKDOWN_STUB
        if BEGIN_SOLUTION in source:
            return _replace_regions(source, BEGIN_SOLUTION, END_SOLUTION, stub, where)
        return stub
    if is_test(cell):
        return _replace_regions(source, BEGIN_HIDDEN, END_HIDDEN, None, where)
    return source


def strip_markers(source: str, where: str) -> str:
    """The instructor's full source without the marker lines (solutions and hidden tests kept)."""
    for begin, end in ((BEGIN_SOLUTION, END_SOLUTION), (BEGIN_HIDDEN, END_HIDDEN)):
        _replace_regions(source, begin, end, None, where)   # validates nesting
        source = "\n".join(l for l in source.splitlines() if l.strip() not in (begin, end))
    return source


def auto_id(index: int, cell) -> str:
    digest = hashlib.sha256(cell.get("source", "").encode("utf-8")).hexdigest()[:8]
    return f"cell-{index}-{digest}"


def validate_source(nb) -> None:
    """Check the nbgrader markup of an instructor notebook; raise NotebookFormatError."""
    seen = set()
    n_tests = 0
    for i, cell in enumerate(nb.cells):
        where = f"cell {i}"
        m = meta(cell)
        if not m:
            continue
        gid = m.get("grade_id")
        if (m.get("solution") or m.get("grade")) and not gid:
            raise NotebookFormatError(f"{where}: a solution or graded cell needs a grade_id")
        if gid:
            if not re.fullmatch(r"[\w.-]+", gid):
                raise NotebookFormatError(f"{where}: grade_id {gid!r} may only use letters, "
                                          f"digits, '_', '-', '.'")
            if gid in seen:
                raise NotebookFormatError(f"{where}: grade_id {gid!r} is used twice")
            seen.add(gid)
        if is_test(cell):
            n_tests += 1
            if points(cell) <= 0:
                raise NotebookFormatError(f"{where} ({gid}): a test cell needs points > 0")
        source = cell.get("source", "")
        if (BEGIN_SOLUTION in source) and not m.get("solution"):
            raise NotebookFormatError(f"{where} ({gid}): {BEGIN_SOLUTION} in a cell that is not "
                                      f"marked solution")
        if BEGIN_HIDDEN in source and not is_test(cell):
            raise NotebookFormatError(f"{where} ({gid}): hidden tests in a cell that is not a "
                                      f"test cell")
        student_source(cell, f"{where} ({gid})")   # marker nesting
    if n_tests == 0:
        raise NotebookFormatError("the notebook has no autograder test cell (nbgrader metadata "
                                  "grade: true, solution: false)")
