"""nbgrader's submitted/<student>/<assignment>/ layout with several assignments collected."""
import os

from gpumemlab.classroom.intake import find_submissions


def test_each_assignment_reads_its_own_folder_and_timestamp(tmp_path):
    for student in ("ada", "bob"):
        for assignment in ("ps1", "ps2"):
            d = tmp_path / student / assignment
            d.mkdir(parents=True)
            (d / "lab.ipynb").write_text(f"{student} {assignment}")
    flat = tmp_path / "cy"
    flat.mkdir()
    (flat / "lab.ipynb").write_text("cy")
    os.symlink(tmp_path / "ada" / "ps2", tmp_path / "bob" / "ps3")   # a link is not followed
    found = {sid: (folder, nb) for sid, folder, nb in find_submissions(tmp_path, "lab.ipynb",
                                                                       "ps2")}
    assert found["ada"][1].read_text() == "ada ps2"
    assert found["bob"][1].read_text() == "bob ps2"
    assert found["cy"][0] == flat and found["cy"][1].read_text() == "cy"
    linked = {sid: folder for sid, folder, _ in find_submissions(tmp_path, "lab.ipynb", "ps3")}
    assert linked["bob"] == tmp_path / "bob"
    # without an assignment, two notebooks of the same name: the shallowest, first by name
    assert find_submissions(tmp_path, "lab.ipynb")[0][2].read_text() == "ada ps1"
