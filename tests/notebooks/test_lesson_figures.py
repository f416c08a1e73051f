"""Each figure once, and every drawing cell shows it: over the executed lessons, no code cell
shows the same image twice or more images than figures it draws (a figure left open is drawn by
the inline backend at the end of the cell, then again by the ``fig`` on its last line); a cell
that draws a figure shows one (a cell that ends in an assignment shows nothing); no legend or
label carries a kernel's temporary file name; one colour per category across the lessons.
A cell's figures are those matplotlib made while it ran and the texts and legend colours those it
drew (``lesson_runs.RECORD`` notes both in the kernel), so a helper that makes a figure counts
wherever the lesson calls it."""
from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # tests/: the shared runner
from lesson_runs import LESSONS, drawn, executed, made  # noqa: E402

pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

# A call that makes a figure (matplotlib's, or one of the kit's views that return a Figure).
DRAWS = re.compile(r"plt\.subplots\(|plt\.figure\(|gml\.show\(|gml\.timeline\(|\.plot_[a-z_]+\(")


def images(cell):
    """The PNGs a cell shows: image outputs, and inline images of HTML outputs that have none
    (a widget's static view)."""
    found = []
    for o in cell.get("outputs", []):
        data = o.get("data", {})
        found += [data["image/png"]] if "image/png" in data else \
            re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", str(data.get("text/html", "")))
    return found


def output_texts(cells):
    """(cell index, text) for each output of the code cells: printed text and plain reprs."""
    return [(i, o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
            for i, c in enumerate(cells) if c.cell_type == "code" for o in c.get("outputs", [])]


def figures_made(source: str) -> int:
    return len(DRAWS.findall(source))


@pytest.mark.parametrize("key", LESSONS)
def test_each_figure_is_shown_once_and_every_drawing_cell_shows_one(key, tmp_path_factory):
    cells, _, _ = executed(key, tmp_path_factory)
    made_by = [made(key, tmp_path_factory).count(i) for i in range(len(cells))]
    wrong = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "code" or cell.metadata.get("tags") == ["check"]:
            continue
        shown = images(cell)
        digests = [hashlib.sha256(s.encode()).hexdigest() for s in shown]
        n_made = max(figures_made(cell.source), made_by[i])
        if len(set(digests)) < len(digests):
            wrong.append(f"cell {i} shows the same image {len(digests)} times")
        elif n_made and len(shown) > n_made:
            wrong.append(f"cell {i} makes {n_made} figure(s) and shows {len(shown)} images")
        if n_made and not shown:
            wrong.append(f"cell {i} draws a figure and shows none")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("key", LESSONS)
def test_no_kernel_temp_name_in_a_figure_or_its_text(key, tmp_path_factory):
    cells, _, _ = executed(key, tmp_path_factory)
    texts = output_texts(cells) + [(d["cell"], "\n".join(d["titles"] + d["texts"]))
                                   for d in drawn(key, tmp_path_factory)]
    found = [f"cell {i}: {m}" for i, text in texts
             for m in re.findall(r"ipykernel_\d+/\d+\.py|/tmp/ipykernel", text)]
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


def test_every_lessons_figure_was_read(tmp_path_factory):
    """The recorder read every figure the lessons drew (else the tests below see nothing)."""
    failed = [f"{key} cell {d['cell']}: {d['error']}" for key in LESSONS
              for d in drawn(key, tmp_path_factory) if "error" in d]
    assert not failed and any(drawn(key, tmp_path_factory) for key in LESSONS), failed


@pytest.mark.parametrize("key", LESSONS)
def test_no_legend_or_title_is_cut_off(key, tmp_path_factory):
    """Every legend and title lies inside the image drawn (a legend placed beside the axes needs
    the layout or the tight box to make room for it)."""
    cut = [f"cell {d['cell']}: {c}" for d in drawn(key, tmp_path_factory) for c in d.get("cut", [])]
    assert not cut, "\n".join(cut)


def test_a_category_has_one_colour_in_every_lessons_figures(tmp_path_factory):
    """A legend entry naming a category (what an allocation is for, a block's state, a memory
    series: ``palette.CATEGORIES``) has the same colour in every figure of every lesson."""
    from gpumemlab.viz.palette import CATEGORIES

    seen = {}
    for key in LESSONS:
        for d in drawn(key, tmp_path_factory):
            for label, colour in d["legend"]:
                if label in CATEGORIES:
                    seen.setdefault(label, {}).setdefault(colour, []).append(f"{key} cell {d['cell']}")
    assert {"parameter", "activation", "reserved"} <= set(seen), sorted(seen)
    wrong = {label: where for label, where in seen.items()
             if len(where) > 1 or CATEGORIES[label].lower() not in where}
    assert not wrong, "\n".join(f"{label!r} (palette {CATEGORIES[label]}): " + "; ".join(
        f"{colour} in {', '.join(places[:4])}" for colour, places in where.items())
        for label, where in wrong.items())


# The lessons whose printed text has been read for counts (add one once it reads right).
PLURALS_CHECKED = ("01", "02", "05", "06", "09", "12", "13", "17")
NOUNS = ("segment", "page", "block", "tensor", "hole", "allocation", "piece", "release moment",
         "trace entr", "call", "step", "line", "distinct size")
NOT_A_COUNT = r"(?:KiB|MiB|GiB|B|bytes?|%|x|×|GB|MB)"    # "1 MiB blocks": a size, not a count


def miscounts(text):
    """"1 segments", "in 1 blocks", "2 segment", "segment(s)": a count whose noun does not agree."""
    word = "|".join(NOUNS)      # words on one line: a figure's "0\ntensor" is two labels
    one = rf"(?<![\d.,\w])1 (?:(?!{NOT_A_COUNT}\b)[a-z]+ )?(?:{word})(?:s|ies)\b"
    many = rf"(?<![\d.,\w-])(?:0|[2-9]|\d{{2,}}) (?:{word})(?:y)?\b(?![-(]|s|ies| +[a-z]+s\b)"
    return [m.group(0) for m in re.finditer(rf"{one}|{many}|\b(?:{word})\(s\)", text)]


@pytest.mark.parametrize("key", PLURALS_CHECKED)
def test_a_count_agrees_with_its_noun(key, tmp_path_factory):
    """No output or figure text says "1 segments", "in 1 blocks", "2 segment" or "segment(s)".
    Lesson 11 (now 12 and 13) once printed "reserved 20.00 MiB in 1 segments" and "= 1 pages of 20 MiB"."""
    cells, _, _ = executed(key, tmp_path_factory)
    texts = output_texts(cells) + [(d["cell"], "\n".join(d["titles"] + d["texts"]))
                                   for d in drawn(key, tmp_path_factory)]
    found = [f"cell {i}: {m!r}" for i, text in texts for m in miscounts(text)]
    assert not found, "\n".join(found)


def test_the_count_finder_sees_what_it_is_for():
    assert miscounts("reserved 20.00 MiB in 1 segments") == ["1 segments"]
    assert miscounts("= 1 pages of 20 MiB") == ["1 pages"]
    assert miscounts("free cached 4 GiB in 1 blocks") == ["1 blocks"]
    assert miscounts("0 new segment(s)") == ["segment(s)"]
    assert miscounts("3 tensor allocations -> 2 segment") == ["2 segment"]
    assert miscounts("1 trace entries") == ["1 trace entries"]
    assert miscounts("12 blocks in 1 lines of code") == ["1 lines"]
    assert not miscounts("0\ntensor")
    assert not miscounts("1 block, 2 blocks, 1 MiB blocks, 4 × 1 GiB blocks, 12 blocks")
    assert not miscounts("a 2 MiB segment, 20 MiB segment, 16-token block, 1 segment")
