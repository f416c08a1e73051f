"""Each figure once, and every drawing cell shows it: over the executed lessons, no code cell
shows the same image twice or more images than figures it draws (a figure left open is drawn by
the inline backend at the end of the cell, then again by the ``fig`` on its last line); a cell
that draws a figure shows one (a cell that ends in an assignment shows nothing); no legend or
label carries a kernel's temporary file name; one colour per category across the lessons."""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/: the shared runner
from lesson_runs import LESSONS, executed  # noqa: E402

pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

# A call that makes a figure (matplotlib's, or one of the kit's views that return a Figure).
DRAWS = re.compile(r"plt\.subplots\(|plt\.figure\(|gml\.show\(|gml\.timeline\(|\.plot_[a-z_]+\(")


def images(cell):
    return [o["data"]["image/png"] for o in cell.get("outputs", [])
            if "image/png" in o.get("data", {})]


def output_texts(cells):
    """(cell index, text) for each output of the code cells: printed text and plain reprs."""
    return [(i, o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
            for i, c in enumerate(cells) if c.cell_type == "code" for o in c.get("outputs", [])]


def figures_made(source: str) -> int:
    return len(DRAWS.findall(source))


@pytest.mark.parametrize("key", LESSONS)
def test_each_figure_is_shown_once_and_every_drawing_cell_shows_one(key, tmp_path_factory):
    cells, _, _ = executed(key, tmp_path_factory)
    wrong = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "code" or cell.metadata.get("tags") == ["check"]:
            continue
        shown = images(cell)
        digests = [hashlib.sha256(s.encode()).hexdigest() for s in shown]
        made = figures_made(cell.source)
        if len(set(digests)) < len(digests):
            wrong.append(f"cell {i} shows the same image {len(digests)} times")
        elif made and len(shown) > made:
            wrong.append(f"cell {i} draws {made} figure(s) and shows {len(shown)} images")
        if made and not shown:
            wrong.append(f"cell {i} draws a figure and shows none")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("key", LESSONS)
def test_no_kernel_temp_name_in_a_figure_or_its_text(key, tmp_path_factory):
    cells, _, _ = executed(key, tmp_path_factory)
    found = [f"cell {i}: {m}" for i, text in output_texts(cells)
             for m in re.findall(r"ipykernel_\d+/\d+\.py", text)]
    assert not found, "\n".join(found)


def test_one_colour_per_category_across_lessons():
    """A category has one colour in every figure (07's and 10's timelines by category), whatever
    the bytes rank it."""
    from gpumemlab.viz.active_timeline import _colours
    from gpumemlab.viz.palette import CATEGORY_COLOURS

    def colours(sizes):
        data = {"by": "category", "bands": [{"key": k, "size": n} for k, n in sizes.items()]}
        return _colours(data)[0]
    lesson07 = colours({"activation": 900, "parameter": 100, "gradient": 50})
    lesson10 = colours({"parameter": 900, "optimizer_state": 300, "activation": 10})
    for key in ("activation", "parameter"):
        assert lesson07[key] == lesson10[key] == CATEGORY_COLOURS[key]


# The lessons whose printed text has been read for counts of one (add one once it reads right).
PLURALS_CHECKED = ("12", "13", "17")


@pytest.mark.parametrize("key", PLURALS_CHECKED)
def test_a_count_of_one_is_printed_singular(key, tmp_path_factory):
    """No output says "1 segments", "1 pages" or "in 1 blocks". Lesson 11 (now 12 and 13) once printed
    "reserved 20.00 MiB in 1 segments" and "= 1 pages of 20 MiB"."""
    cells, _, _ = executed(key, tmp_path_factory)
    found = [f"cell {i}: {m.group(0)!r}" for i, text in output_texts(cells)
             for m in re.finditer(r"(?<![\d.,])1 (segments|pages|blocks)\b", text)]
    assert not found, "\n".join(found)
