"""Build the notebook the grader runs: the source's structure, the student's answers.

The graded notebook is never the student's file as handed in. It is rebuilt from the source
(instructor) notebook: every cell keeps the source's content except the solution cells, which take
the student's text (matched by nbgrader ``grade_id``; a missing one becomes the stub). Cells the
student added are kept after the cell they followed. Test cells come from the source, hidden
tests included, wrapped by ``kernel_guard.wrapper_source``; a sandbox cell goes first. So deleting,
editing or forging test cells changes nothing. Judge calls (``verdicts``) are taken out of the test
cells: only the request for the student's answers goes in.
"""
from __future__ import annotations

import ast
import copy

from . import cells as C
from .kernel_guard import pass_token, startup_source, wrapper_source

ROLE = "gpumemlab_grader"


def source_ids(nb) -> list:
    """One id per source cell: its nbgrader grade_id, or a stable id for unmarked cells."""
    return [C.grade_id(cell) or C.auto_id(i, cell) for i, cell in enumerate(nb.cells)]


def tests_of(nb) -> list:
    """[(grade_id, points)] of the autograder test cells, in order."""
    return [(C.grade_id(c), C.points(c)) for c in nb.cells if C.is_test(c)]


def test_parts(nb) -> dict:
    """{grade_id: (source run inside the submission, [verdicts.Judge])} of every test cell."""
    from .verdicts import split_test

    parts = {}
    for i, cell in enumerate(nb.cells):
        if C.is_test(cell):
            where = f"source cell {i} ({C.grade_id(cell)})"
            parts[C.grade_id(cell)] = split_test(C.strip_markers(cell.source, where), where)
    return parts


def gpumemlab_imports(nb) -> str:
    """The source's import lines that bind gpumemlab names, re-run fresh before every test."""
    lines = ["import gpumemlab", "import gpumemlab as gml"]
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "gpumemlab"
                                                    for a in node.names):
                lines.append(ast.unparse(node))
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] \
                    == "gpumemlab" and node.level == 0:
                lines.append(ast.unparse(node))
    return "\n".join(dict.fromkeys(lines))


def _student_parts(source_nb, student_nb):
    """-> (answers: {grade_id: source text}, extras: {anchor id or None: [cells]})."""
    known = set(source_ids(source_nb))
    solution_ids = {C.grade_id(c) for c in source_nb.cells if C.is_solution(c)}
    answers, extras, anchor, seen = {}, {}, None, set()
    for cell in (student_nb.cells if student_nb is not None else []):
        gid = C.grade_id(cell)
        if gid in known and gid not in seen:
            anchor = gid
            seen.add(gid)
            if gid in solution_ids:
                answers[gid] = cell.get("source", "")
            continue
        if cell.get("cell_type") != "code":
            continue
        extra = copy.deepcopy(cell)
        extra.metadata.pop("nbgrader", None)   # a forged test cell is just ordinary code
        extra.outputs, extra.execution_count = [], None
        extras.setdefault(anchor, []).append(extra)
    return answers, extras


def student_answers(source_nb, student_nb) -> dict:
    """{grade_id: text} of the answer cells as the student handed them in (raw: the grader
    scrubs and caps them for the feedback); never the source's solution or stub."""
    return _student_parts(source_nb, student_nb)[0]


def _code_cell(source, role, **info):
    import nbformat

    cell = nbformat.v4.new_code_cell(source)
    cell.metadata[ROLE] = {"role": role, **info}
    return cell


def build_graded(source_nb, student_nb, *, home, deny_roots, key: bytes, token: str, kit,
                 requests: dict):
    """The notebook to execute for one submission (``student_nb`` may be None: unreadable).

    Test cells keep only what runs inside; their judges become ``requests`` (grade_id ->
    [verdicts.plan(...)]): the answers the kernel must send out. No hidden judge call, key or
    expected value is in the result."""
    import nbformat

    answers, extras = _student_parts(source_nb, student_nb)
    parts = test_parts(source_nb)
    out = nbformat.v4.new_notebook()
    out.metadata = copy.deepcopy(source_nb.metadata)
    startup = startup_source(home, deny_roots, key, token, gpumemlab_imports(source_nb), kit)
    out.cells.append(_code_cell(startup, "startup"))
    for cell in extras.get(None, []):
        cell.metadata[ROLE] = {"role": "student"}
        out.cells.append(cell)
    for i, (cell, cid) in enumerate(zip(source_nb.cells, source_ids(source_nb))):
        where = f"source cell {i} ({cid})"
        if C.is_solution(cell):
            text = answers.get(cid)
            if text is None:
                text = C.student_source(cell, where)
            if cell.cell_type == "code":
                out.cells.append(_code_cell(text, "answer", grade_id=cid))
            else:
                out.cells.append(nbformat.v4.new_markdown_cell(text))
        elif C.is_test(cell):
            inside, _ = parts[cid]
            src = wrapper_source(cid, C.points(cell), inside, token, requests.get(cid, ()))
            out.cells.append(_code_cell(src, "test", grade_id=cid, points=C.points(cell),
                                        token=pass_token(key, cid)))
        elif cell.cell_type == "code":
            out.cells.append(_code_cell(cell.source, "source", grade_id=cid))
        else:
            out.cells.append(copy.deepcopy(cell))
        for extra in extras.get(cid, []):
            extra.metadata[ROLE] = {"role": "student"}
            out.cells.append(extra)
    return out


def student_version(source_nb):
    """nbgrader's student version: stubs for solutions, no hidden tests, non-answers locked."""
    C.validate_source(source_nb)
    nb = copy.deepcopy(source_nb)
    for i, (cell, cid) in enumerate(zip(nb.cells, source_ids(source_nb))):
        where = f"cell {i} ({cid})"
        m = dict(C.meta(cell))
        solution = bool(m.get("solution"))
        cell.source = C.student_source(cell, where)
        m.update({"grade_id": cid, "solution": solution, "grade": bool(m.get("grade")),
                  "locked": not solution, "schema_version": 3})
        if C.is_test(cell):
            m["points"] = C.points(cell)
        cell.metadata["nbgrader"] = m
        if not solution:
            cell.metadata["editable"], cell.metadata["deletable"] = False, False
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb
