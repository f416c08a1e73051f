#!/usr/bin/env python
"""Build the example assignment, gpumemlab/classroom/example/ (what ``gpumemlab course example
DIR`` writes): an instructor notebook in nbgrader markup, ``fragmentation_lab.ipynb``, with one
graded question every student shares and two graded per-student variant questions, and a
three-student ``roster.csv``.

The variant cells of the source show the teacher's preview variant (``variants.PREVIEW_SEED``,
no student's) and the solutions answer it: both are computed here by the same code
``gpumemlab assign`` and the grader use, never typed. The file is written with stable cell ids,
so an unchanged build is byte-identical (tests/classroom/test_course_example.py checks the
committed file is what this makes).

    python scripts/build_example_assignment.py           # write it
    python scripts/build_example_assignment.py --check   # exit 1 when the committed one is stale
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpumemlab.classroom.variants import PREVIEW_SEED, expected, render, variant_questions  # noqa: E402

OUT = ROOT / "gpumemlab" / "classroom" / "example"
NOTEBOOK = "fragmentation_lab.ipynb"
# ids are the students' emails: the field Gradescope's submission metadata names them by
ROSTER = ("id,first_name,last_name,email\n"
          "ada@example.org,Ada,Lovelace,ada@example.org\n"
          "alan@example.org,Alan,Turing,alan@example.org\n"
          "grace@example.org,Grace,Hopper,grace@example.org\n")
OOM = {"id": "lab.oom", "generator": "fragmented_oom",
       "prompt": "Predict whether the last request fails with an out-of-memory error."}
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def nbg(cell, gid, *, solution=False, points=0):
    cell.metadata["nbgrader"] = {"grade_id": gid, "solution": solution, "grade": bool(points),
                                 "locked": not solution, "schema_version": 3,
                                 **({"points": points} if points else {})}
    return cell


def variant_cell(qid):
    cell = new_markdown_cell("(each student's own numbers appear here)")
    cell.metadata["gpumemlab"] = {"variant": qid}
    return cell


def answer_and_test(qid, name, answer, gid):
    """A solution cell answering the preview variant and a 1-point test whose judge is hidden
    (only the grader knows each student's variant)."""
    return [nbg(new_code_cell(f"### BEGIN SOLUTION\n{name} = {answer}\n### END SOLUTION"),
                f"{gid}-answer", solution=True),
            nbg(new_code_cell(f"assert {name} is not None, 'answer {name} above'\n"
                              f"### BEGIN HIDDEN TESTS\ngml.quiz.assert_correct('{qid}', {name})\n"
                              f"### END HIDDEN TESTS"), f"{gid}-test", points=1)]


def build():
    intro = new_markdown_cell(
        "# Lab: rounding, segments and fragmentation\n\n"
        "Three graded questions. Question 1 is the same for everyone; in questions 2 and 3 the "
        "allocation sequence is your own (other students see other numbers), so work it out "
        "from the cell shown, on the simulated GPU or by hand. Answer in the cells marked for "
        "it and leave the other cells as they are.")
    cells = [intro, new_code_cell("import gpumemlab as gml"),
             new_markdown_cell("**1.** Write `round_size(size)`: the size of the block PyTorch's "
                               "caching allocator hands out for a request of `size` bytes "
                               "(lesson 01)."),
             nbg(new_code_cell("def round_size(size):\n    ### BEGIN SOLUTION\n"
                               "    return max(512, -(-size // 512) * 512)\n"
                               "    ### END SOLUTION"), "round-size-answer", solution=True),
             nbg(new_code_cell("assert round_size(1) == 512\n### BEGIN HIDDEN TESTS\n"
                               "gml.quiz.assert_correct('01.5', round_size)\n"
                               "### END HIDDEN TESTS"), "round-size-test", points=2),
             new_markdown_cell("**2.** How many MiB does your sequence leave reserved? "
                               "Answer `reserved_mib`, a number.")]
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = KERNELSPEC
    nb.metadata["gpumemlab"] = {"variants": [OOM]}
    probe = copy.deepcopy(nb)
    probe.cells += [variant_cell("01.7"), variant_cell("lab.oom")]
    questions = variant_questions(probe)
    reserved = float(expected(questions["01.7"][0], PREVIEW_SEED).split()[0])
    oom = expected(questions["lab.oom"][0], PREVIEW_SEED)
    nb.cells += [variant_cell("01.7"), *answer_and_test("01.7", "reserved_mib", repr(reserved),
                                                        "reserved"),
                 new_markdown_cell("**3.** Does the last request of your sequence fail? Answer "
                                   "`oom`, `'yes'` or `'no'`."),
                 variant_cell("lab.oom"), *answer_and_test("lab.oom", "oom", repr(oom), "oom")]
    for cell in nb.cells:     # the teacher's copy shows the preview variant its solutions answer
        qid = cell.metadata.get("gpumemlab", {}).get("variant")
        if qid:
            cell.source = render(questions[qid][0], PREVIEW_SEED)
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:02d}"
    return {NOTEBOOK: nbformat.writes(nb) + "\n", "roster.csv": ROSTER}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the committed files are stale")
    args = p.parse_args(argv)
    files = build()
    if args.check:
        stale = [n for n, text in files.items()
                 if not (OUT / n).is_file() or (OUT / n).read_text(encoding="utf-8") != text]
        for n in stale:
            print(f"stale: {OUT / n} (run scripts/build_example_assignment.py)")
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (OUT / n).write_text(text, encoding="utf-8")
        print(f"wrote {OUT / n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
