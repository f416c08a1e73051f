"""The curriculum notebooks are committed as clean, reproducible lesson files.

Checks, for every notebook of the curriculum: it exists under its agreed name, is valid nbformat
4 with the python3 kernelspec, has no outputs or execution counts (so nbval runs it and never
compares stale outputs), starts with a code cell that says which device it runs on, makes real
claims in assert cells, ends with the quiz of its own number (whose bank exists), and is exactly
what scripts/build_notebooks.py builds from its jupytext source in notebooks/src/ (so the reviewed
Python source and the .ipynb never drift apart), and that source is real Python that round-trips. Running the notebooks is nbval's job (``./kit test``).
"""
from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
SOURCE_DIR = NOTEBOOK_DIR / "src"
CURRICULUM = sorted(p.stem for p in SOURCE_DIR.glob("[0-9][0-9]_*.py"))


def _builder():
    spec = importlib.util.spec_from_file_location("build_notebooks",
                                                  ROOT / "scripts" / "build_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(name: str):
    path = NOTEBOOK_DIR / f"{name}.ipynb"
    assert path.exists(), f"{path.relative_to(ROOT)} is missing"
    return nbformat.read(path, as_version=4)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_every_notebook_has_its_source_and_lessons_are_numbered_in_order():
    present = sorted(p.stem for p in NOTEBOOK_DIR.glob("*.ipynb"))
    assert present == CURRICULUM
    assert list(_builder().lessons().values()) == CURRICULUM
    # numbered in order, one lesson per number; 00-09 are consecutive, later lessons (10-17)
    # keep the number their issue gave them
    numbers = [int(name[:2]) for name in CURRICULUM]
    assert numbers == sorted(set(numbers))
    assert CURRICULUM[:10] == ["00_setup", "01_why_a_cache", "02_fragmentation",
                               "03_reading_the_evidence", "04_empty_cache", "05_allocator_settings",
                               "06_expandable_segments", "07_activations", "08_paged_kv_cache",
                               "09_diagnose_your_run"]


@pytest.mark.parametrize("name", CURRICULUM)
def test_valid_notebook_with_python3_kernelspec(name):
    nb = _read(name)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["kernelspec"]["language"] == "python"


@pytest.mark.parametrize("name", CURRICULUM)
def test_committed_without_outputs(name):
    nb = _read(name)
    assert "widgets" not in nb.metadata, "saved widget state: strip the notebook"
    for i, cell in enumerate(_code_cells(nb)):
        assert cell.execution_count is None, f"code cell {i} has an execution count"
        assert cell.outputs == [], f"code cell {i} has outputs"
        assert "execution" not in cell.metadata, f"code cell {i} has execution timing metadata"


@pytest.mark.parametrize("name", CURRICULUM)
def test_first_code_cell_reports_the_device(name):
    first = _code_cells(_read(name))[0].source
    assert "import gpumemlab as gml" in first
    assert re.search(r"^gpu = gml\.device\(\)", first, re.M), "the first cell must use gml.device()"
    assert "print(gpu.describe())" in first
    assert "gpu.kind" in first, "the first cell must say whether the GPU is real or simulated"


@pytest.mark.parametrize("name", CURRICULUM)
def test_ends_with_its_own_quiz(name):
    nb = _read(name)
    last = nb.cells[-1]
    number = name[:2]
    assert last.cell_type == "code"
    assert last.source.strip() == f'gml.quiz("{number}")'
    assert list((ROOT / "quizzes").glob(f"{number}_*.yaml")), f"no quiz bank for notebook {number}"


@pytest.mark.parametrize("name", CURRICULUM)
def test_claims_are_checked_by_asserts(name):
    asserts = sum(len(re.findall(r"^\s*assert ", c.source, re.M)) for c in _code_cells(_read(name)))
    assert asserts >= 3, f"{name} states results without checking them ({asserts} asserts)"


@pytest.mark.parametrize("name", CURRICULUM)
def test_no_output_comparisons_on_stripped_cells(name):
    # outputs are never stored, so a CHECK_OUTPUT marker would be a claim nbval never checks
    for cell in _code_cells(_read(name)):
        assert "NBVAL_CHECK_OUTPUT" not in cell.source


@pytest.mark.parametrize("name", CURRICULUM)
def test_notebook_matches_its_generator_source(name):
    builder = _builder()
    key = name[:2]
    text = (NOTEBOOK_DIR / f"{name}.ipynb").read_text(encoding="utf-8")
    assert text == builder.render(key), (
        f"{name}.ipynb differs from notebooks/src/{name}.py: run python scripts/build_notebooks.py {key}")


@pytest.mark.parametrize("name", CURRICULUM)
def test_source_is_python_in_jupytext_percent_format(name):
    text = (SOURCE_DIR / f"{name}.py").read_text(encoding="utf-8")
    ast.parse(text, filename=f"{name}.py")  # real Python: magics are comments in percent format
    assert text.startswith("# %%"), "a lesson source starts with its first cell marker"


@pytest.mark.parametrize("name", CURRICULUM)
def test_source_round_trips_through_the_notebook(name):
    # what --pull writes back from an unchanged notebook is the source itself
    builder = _builder()
    assert builder.source_text(builder.build(name[:2])) == (SOURCE_DIR / f"{name}.py").read_text(encoding="utf-8")


# ---- lessons as experiments (issue 10): predict before reveal, an exercise, hidden checks
LESSONS = [n for n in CURRICULUM if n[:2] != "00"]
WHATIF_LESSONS = {"05", "06", "07", "09"}
_PREDICT = re.compile(r"""gml\.predict\(\s*["'](\d\d\.p\d+)["']""")
_REVEAL = re.compile(r"""gml\.reveal\(\s*["'](\d\d\.p\d+)["']""")
_EXERCISE = re.compile(r"""gml\.exercise\.check\(\s*["'](\d\d\.ex\w*)["']""")


def _tags(cell):
    return set(cell.metadata.get("tags", []))


@pytest.mark.parametrize("name", LESSONS)
def test_at_least_two_predict_cells_each_before_its_reveal(name):
    cells = _code_cells(_read(name))
    asked = {}
    for i, cell in enumerate(cells):
        for pid in _PREDICT.findall(cell.source):
            assert "predict" in _tags(cell), f"{pid} is asked in a cell not tagged predict"
            asked[pid] = i
    assert len(asked) >= 2, f"{name} has {len(asked)} predict cells"
    for pid, at in asked.items():
        assert all(pid.startswith(name[:2] + ".") for pid in asked)
        reveals = [i for i, c in enumerate(cells) if pid in _REVEAL.findall(c.source)]
        assert reveals, f"{pid} is never revealed"
        assert min(reveals) > at, f"{pid} is revealed before it is asked"


@pytest.mark.parametrize("name", LESSONS)
def test_an_exercise_cell_with_a_registered_exercise(name):
    from gpumemlab.lessons import get

    cells = [c for c in _code_cells(_read(name)) if "exercise" in _tags(c)]
    ids = [i for c in cells for i in _EXERCISE.findall(c.source)]
    assert ids, f"{name} has no cell tagged exercise calling gml.exercise.check"
    for ex_id in ids:
        assert ex_id.startswith(name[:2] + ".")
        get(ex_id)   # raises KeyError for an unknown exercise


@pytest.mark.parametrize("name", LESSONS)
def test_checks_sit_in_hidden_check_cells(name):
    cells = _code_cells(_read(name))
    checks = [c for c in cells if "check" in _tags(c)]
    assert checks, f"{name} has no check cell"
    for c in checks:
        assert c.metadata.get("jupyter", {}).get("source_hidden") is True, c.source[:60]
    loose = [c.source[:60] for c in cells if "check" not in _tags(c)
             and re.search(r"^\s*assert ", c.source, re.M)]
    assert not loose, f"asserts outside check cells: {loose}"


@pytest.mark.parametrize("name", [n for n in LESSONS if n[:2] in WHATIF_LESSONS])
def test_what_if_controls(name):
    assert any("gml.whatif(" in c.source for c in _code_cells(_read(name)))


# ---- text belongs in markdown cells: a heading, a table or a paragraph written as `#` comments
# in a code cell renders as grey code, and an empty markdown cell is a gap in the lesson
_MD_HEADING_COMMENT = re.compile(r"^\s*#\s+#{1,6}\s")        # "# ## Choosing"
_MD_TABLE_COMMENT = re.compile(r"^\s*#\s*\|.*\|\s*$")        # "# | symptom | try |"
PROSE_RUN = 4   # this many comment lines in a row is a paragraph, not a remark on the code


def _trapped_text(source: str) -> list:
    found, run = [], []
    for line in source.splitlines() + [""]:
        if _MD_HEADING_COMMENT.match(line) or _MD_TABLE_COMMENT.match(line):
            found.append(line.strip())
        if line.lstrip().startswith("#"):
            run.append(line)
            continue
        if len(run) >= PROSE_RUN:
            found.append(f"{len(run)} comment lines from {run[0].strip()[:40]!r}")
        run = []
    return found


def test_trapped_text_finder_sees_headings_tables_and_paragraphs():
    assert _trapped_text("x = 1\n# ## Choosing\n") == ["# ## Choosing"]
    assert _trapped_text("# | a | b |\n# |---|---|\n") == ["# | a | b |", "# |---|---|"]
    assert len(_trapped_text("f()\n" + "# words\n" * PROSE_RUN)) == 1
    assert _trapped_text("f()   # why\n# a remark\n# on two lines\ng()\n") == []


@pytest.mark.parametrize("name", CURRICULUM)
def test_no_lesson_text_trapped_in_code_cells(name):
    for i, cell in enumerate(_read(name).cells):
        if cell.cell_type == "code":
            trapped = _trapped_text(cell.source)
            assert not trapped, f"{name} cell {i}: markdown written as comments: {trapped}"


@pytest.mark.parametrize("name", CURRICULUM)
def test_no_empty_markdown_cell(name):
    for i, cell in enumerate(_read(name).cells):
        if cell.cell_type == "markdown":
            assert cell.source.strip("# \n"), f"{name} cell {i} is an empty markdown cell"


def test_lesson_00_lists_the_curriculum_from_the_notebooks_present():
    # the course map is computed from the notebooks present, never typed: lesson 00 prints it
    from gpumemlab.lessons.course_map import course_map
    assert "cm.course_map()" in "".join(c.source for c in _code_cells(_read("00_setup")))
    lessons = course_map(NOTEBOOK_DIR)
    assert list(lessons) == [name[:2] for name in CURRICULUM]
    for name in CURRICULUM:
        first_line = (SOURCE_DIR / f"{name}.py").read_text(encoding="utf-8").splitlines()[1]
        assert first_line.endswith(lessons[name[:2]]["title"]), (name, lessons[name[:2]]["title"])
        assert lessons[name[:2]]["tracks"], f"{name} is on no track"


def test_course_map_times_follow_the_work(tmp_path):
    # a copy of lesson 02 with one more prediction and 240 more words takes exactly that much longer
    import json
    from gpumemlab.lessons import course_map as cm
    nb = json.loads((NOTEBOOK_DIR / "02_fragmentation.ipynb").read_text(encoding="utf-8"))
    before = cm.lesson_work(NOTEBOOK_DIR / "02_fragmentation.ipynb")
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "word " * 240 + "notebook 01"})
    nb["cells"].append({"cell_type": "code", "metadata": {"tags": ["predict"]}, "source": "x = 1",
                        "outputs": [], "execution_count": None})
    (tmp_path / "02_fragmentation.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    after = cm.lesson_work(tmp_path / "02_fragmentation.ipynb")
    assert after["predictions"] == before["predictions"] + 1 and "01" in after["needs"]
    gained = cm.minutes(after, 0) - cm.minutes(before, 0)
    assert gained == pytest.approx(240 / cm.WORDS_PER_MINUTE + 2 / cm.WORDS_PER_MINUTE
                                   + 1 / cm.CODE_LINES_PER_MINUTE + cm.MINUTES_PER_PREDICTION)
