"""Every cell of a lesson can be re-run after Run All, in any order (issue 35 item 3): a learner
who predicts after Run All re-runs a reveal, or goes back to an experiment, and gets neither an
error nor a different verdict. So an experiment cell builds the state it measures, a reveal or an
assert reads the figure its own experiment kept (never the live state a later cell moved on),
and a cell that drops something (``del``, ``reset()``) can run twice.

The lesson runs headless top to bottom in one kernel, then every code cell runs again, last to
first, then first to last; no run may raise. Lesson 11's cell 20 once raised IndexError on a
second run (``live[2]`` of the list it had cleared), and its ``reset()`` cell PoolError.
"""
from __future__ import annotations

import copy
import os

import pytest

from lesson_runs import ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

# The lessons checked so far; add one once all its cells re-run (each costs a few runs of it).
RERUN_CHECKED = ("11",)


def rerun_errors(key, progress) -> list:
    """'cell i (pass): error' for every code cell that raised when run again after Run All."""
    def plan(code):
        return (("Run All", code), ("again, last to first", code[::-1]),
                ("again, first to last", code))
    return run_errors(key, progress, plan)


def run_errors(key, progress, plan) -> list:
    """'cell i (pass): error' for every code cell that raised, the cells run in the passes
    ``plan(code cell indices)`` gives: (name, cell indices) pairs, in one kernel."""
    path = next((ROOT / "notebooks").glob(f"{key}_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    env = {"GPUMEMLAB_HEADLESS": "1", "GPUMEMLAB_PROGRESS": str(progress),
           "GPUMEMLAB_QUIZ_SEED": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    old = dict(os.environ)
    os.environ.update(env)
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    errors = []
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                         resources={"metadata": {"path": str(path.parent)}})
        with client.setup_kernel():
            for name, order in plan(code):
                for i in order:
                    cell = copy.deepcopy(nb.cells[i])
                    client.execute_cell(cell, i)
                    errors += [f"cell {i} ({name}): {o.get('ename')}: {o.get('evalue')}"
                               for o in cell.outputs if o.get("output_type") == "error"]
    finally:
        os.environ.clear()
        os.environ.update(old)
    return errors


@pytest.mark.parametrize("key", RERUN_CHECKED)
def test_every_cell_reruns_after_run_all_in_any_order(key, tmp_path):
    errors = rerun_errors(key, tmp_path / "progress.json")
    assert not errors, "\n".join(errors)


def test_lesson15_pinned_copy_cell_reruns(tmp_path):
    """Lesson 15's cell 17 (after synchronize(): a third buffer takes the first block) frees only
    the buffer it pins, so it runs twice and its check still holds. It once freed the second
    buffer, made in cell 11: run again, ValueError: double free."""
    def plan(code):
        return (("top to 17", [i for i in code if i <= 17]), ("17 twice more", [17, 17]),
                ("then 18 and its check", [18, 19]))
    errors = run_errors("15", tmp_path / "progress.json", plan)
    assert not errors, "\n".join(errors)
