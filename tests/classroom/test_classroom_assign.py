"""gpumemlab assign: the student version, and the check that it is gradeable."""
import copy
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
from gpumemlab.cli import main  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.classroom.cells import NotebookFormatError, validate_source  # noqa: E402

SOURCE = Path(__file__).resolve().parents[1] / "fixtures" / "classroom" / "source" / "lab.ipynb"


def load():
    return nbformat.read(str(SOURCE), as_version=4)


def by_id(nb, gid):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == gid)


def test_student_version_stubs_solutions_drops_hidden_tests_and_locks_cells():
    student = student_version(load())
    answer = by_id(student, "round-size-answer").source
    assert "raise NotImplementedError()" in answer and "max(512" not in answer
    assert answer.startswith("def round_size(size):")   # code around the markers is kept
    assert by_id(student, "reserved-answer").source == "# YOUR CODE HERE\nraise NotImplementedError()"
    test = by_id(student, "round-size-test")
    assert "assert round_size(1) == 512" in test.source
    assert "HIDDEN" not in test.source and "assert_correct" not in test.source
    assert test.metadata["nbgrader"]["locked"] and test.metadata["editable"] is False
    assert by_id(student, "round-size-answer").metadata["nbgrader"]["locked"] is False
    every = [c.metadata["nbgrader"]["grade_id"] for c in student.cells]
    assert len(set(every)) == len(every)   # unmarked cells get stable ids for matching


def test_assign_cli_writes_the_student_version_and_checks_it(tmp_path, capsys):
    status = main(["assign", str(SOURCE), str(tmp_path / "release")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "the source passes every test; the student version fails every test" in out
    written = nbformat.read(str(tmp_path / "release" / "lab.ipynb"), as_version=4)
    assert "BEGIN SOLUTION" not in str(written) and "assert_correct" not in str(written)


def with_extra_test(grade_id, source):
    """The fixture notebook plus one more graded test cell (a copy of reserved-test's)."""
    nb = load()
    cell = copy.deepcopy(by_id(nb, "reserved-test"))
    cell.metadata["nbgrader"]["grade_id"] = grade_id
    cell.source = source
    cell["id"] = f"{grade_id}-cell"
    nb.cells.append(cell)
    return nb


def test_assign_reports_tests_that_give_free_points(tmp_path, capsys):
    nb = with_extra_test("free-test", "assert True")
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                not in ("round-size-test", "frag-test", "frag-answer", "round-size-answer")]
    src = tmp_path / "src.ipynb"
    nbformat.write(nb, str(src))
    # a generous cell timeout: on a loaded machine a kernel can be slow to import the kit
    status = main(["assign", str(src), str(tmp_path / "out"), "--cell-timeout", "90"])
    out = capsys.readouterr().out
    assert status == 1 and "free points): free-test" in out


@pytest.mark.parametrize("edit, message", [
    (lambda nb: by_id(nb, "reserved-test").metadata["nbgrader"].update(points=0),
     "a test cell needs points > 0"),
    (lambda nb: by_id(nb, "frag-test").metadata["nbgrader"].update(grade_id="reserved-test"),
     "grade_id 'reserved-test' is used twice"),
    (lambda nb: setattr(by_id(nb, "reserved-answer"), "source", "### BEGIN SOLUTION\nx = 1"),
     "### BEGIN SOLUTION without ### END SOLUTION"),
])
def test_bad_markup_is_a_clear_error(edit, message, tmp_path, capsys):
    nb = load()
    edit(nb)
    with pytest.raises(NotebookFormatError, match=message):
        validate_source(nb)
    src = tmp_path / "bad.ipynb"
    nbformat.write(nb, str(src))
    assert main(["assign", str(src), str(tmp_path / "o"), "--no-check"]) == 2
    assert message in capsys.readouterr().err


def test_missing_paths_are_one_line_errors(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "nope"), "--source", str(SOURCE)]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_assign_says_when_a_test_could_not_be_checked(tmp_path, capsys):
    """A stub test that never ran (timeout) is not taken as 'fails without answers'."""
    nb = with_extra_test("slow-test", "import time\ntime.sleep(60)")
    src = tmp_path / "src.ipynb"
    nbformat.write(nb, str(src))
    status = main(["assign", str(src), str(tmp_path / "out"), "--cell-timeout", "3"])
    out = capsys.readouterr().out
    assert status == 1 and "could not check" in out and "slow-test" in out
