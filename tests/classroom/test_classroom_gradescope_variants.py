"""Per-student variants on Gradescope: ``gpumemlab gradescope --secret --roster --student-key``
and the zip's real ``run_autograder`` on fake ``/autograder`` trees.

The variant lab (fixtures/classroom/variant_lab.py) is assigned to a roster of emails, packed
once, and graded for a student who answers their own variant (every point, though Gradescope
spells the email in another case), and for one who hands in another student's answers (the
variant test fails). Submissions that cannot be tied to one roster id (no email, a group, an id
the roster lacks, no metadata) are refused with score 0 and the reason, before anything runs.
The zip's wheel is a stand-in: ``run_autograder`` runs with this checkout (the real wheel is
built and checked in test_classroom_gradescope.py).
"""
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
TESTS = Path(__file__).resolve().parents[1]
import gradescope_tree as G  # noqa: E402
import make_submissions as M  # noqa: E402
from variant_lab import SECRET, answer_from_notebook, answered, source_nb  # noqa: E402

from gpumemlab.classroom.intake import safe_name  # noqa: E402
from gpumemlab.classroom.variants import student_seed  # noqa: E402
from gpumemlab.cli import main  # noqa: E402

EMAILS = ("alice@x.org", "bob@x.org", "copier@x.org")
ROSTER = "id,first_name,last_name\n" + "".join(f"{e},{e[0]},X\n" for e in EMAILS)


def _fake_wheel(folder: Path) -> Path:
    kit = folder / "gpumemlab-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(kit, "w") as zf:
        zf.writestr("gpumemlab-0.0.0.dist-info/METADATA", "Name: gpumemlab\n"
                    "Requires-Dist: torch>=2.1\n")
    return kit


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gs-variants")
    src = tmp / "teacher" / "lab.ipynb"
    src.parent.mkdir()
    nbformat.write(source_nb(), str(src))
    (tmp / "roster.csv").write_text(ROSTER)
    (tmp / "course.secret").write_text(SECRET + "\n")
    os.chmod(tmp / "course.secret", 0o600)   # a secret others may read is refused
    opts = ["--secret", str(tmp / "course.secret"), "--roster", str(tmp / "roster.csv")]
    assert main(["assign", str(src), str(tmp / "release"), "--no-check"] + opts) == 0
    books = {e: nbformat.read(str(tmp / "release" / safe_name(e) / "lab.ipynb"), as_version=4)
             for e in EMAILS}
    out = tmp / "lab-autograder.zip"
    kit = _fake_wheel(tmp)
    return {"tmp": tmp, "src": src, "zip": out, "opts": opts, "books": books, "kit": kit,
            "status": main(["gradescope", str(src), str(out), "--dist", str(kit)] + opts)}


def _metadata(**user) -> dict:
    return {"id": 1, "created_at": "2026-12-01T10:00:00-07:00",
            "assignment": {"due_date": "2026-12-02T10:00:00-07:00", "title": "Lab"},
            "users": [user], "previous_submissions": []}


def test_the_zip_carries_the_secret_and_roster_and_the_output_says_teacher_only(course,
                                                                                  capsys):
    assert course["status"] == 0
    with zipfile.ZipFile(course["zip"]) as zf:
        files = {i.filename: zf.read(i) for i in zf.infolist()}
    assert files["teacher/course.secret"].decode().strip() == SECRET
    config = json.loads(files["gpumemlab-autograder.json"])
    assert config["variants"] == {"student_key": "email", "roster": list(EMAILS)}
    for name, data in files.items():   # the secret is in its own file and nowhere else
        if name != "teacher/course.secret":
            assert SECRET.encode() not in data, name
    # the fixture's printed lines went to the module's first capture; pack again to read them
    again = course["tmp"] / "again.zip"
    assert main(["gradescope", str(course["src"]), str(again), "--dist", str(course["kit"]),
                 "--student-key", "email"] + course["opts"]) == 0
    printed = capsys.readouterr().out
    assert "TEACHER ONLY: this zip holds the course secret" in printed
    assert "never share it with students" in printed and "users[].email" in printed


def test_options_that_do_not_fit_the_source_write_no_zip(course, capsys):
    tmp, out = course["tmp"], course["tmp"] / "bad.zip"
    src, kit = str(course["src"]), ["--dist", str(course["kit"])]
    cases = [([src] + kit, "per-student variant questions (01.7, lab.oom): give --secret"),
             ([src, "--secret", str(tmp / "course.secret")] + kit, "give --secret FILE and "
              "--roster CSV"),
             ([src, "--student-key", "id"] + kit + course["opts"],
              "the roster id 'alice@x.org' is not a Gradescope user id (a number)"),
             ([str(M.SOURCE)] + kit + course["opts"][:2],
              "the source has no per-student variant questions: leave out --secret")]
    for args, message in cases:
        assert main(["gradescope", args[0], str(out)] + args[1:]) == 2, args
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
        assert not out.exists() and not list(tmp.glob(".bad.zip*"))


def test_each_student_is_judged_against_their_own_variant(course):
    books = course["books"]
    mine = {e: {q: answer_from_notebook(nb, q) for q in ("01.7", "lab.oom")}
            for e, nb in books.items()}
    assert mine["alice@x.org"]["01.7"] != mine["copier@x.org"]["01.7"]
    # Gradescope's spelling of the address may differ in case from the roster's
    own = G.run_autograder(G.unpack_tree(
        course["zip"], course["tmp"] / "alice", answered(books["alice@x.org"],
                                                         mine["alice@x.org"]),
        _metadata(email="Alice@X.org", id=11, name="Alice")))
    assert own["score"] == 2, own["output"]
    assert [(t["name"], t["status"]) for t in own["tests"]] == [("t0", "passed"),
                                                                 ("t1", "passed")]
    copied = G.run_autograder(G.unpack_tree(
        course["zip"], course["tmp"] / "copier", answered(books["copier@x.org"],
                                                          mine["alice@x.org"]),
        _metadata(email="copier@x.org", id=13, name="C")))
    rows = {t["name"]: t["status"] for t in copied["tests"]}
    assert rows["t0"] == "failed" and copied["score"] < 2, copied["output"]
    secret = bytes.fromhex(SECRET)
    seeds = [student_seed(secret, "lab", e) for e in EMAILS]
    for res in (own, copied):   # neither the seeds nor the secret reach results or the log
        text = json.dumps(res)
        assert SECRET not in text and not [s for s in seeds if s in text]


def test_a_submission_not_tied_to_one_roster_student_is_not_graded(course):
    book = answered(course["books"]["bob@x.org"], {"01.7": 1.0, "lab.oom": "no"})
    group = _metadata(email="bob@x.org", id=12, name="Bob")
    group["users"].append({"email": "alice@x.org", "id": 11, "name": "Alice"})
    cases = {"no-email": (_metadata(id=12, name="Bob"), "Gradescope gave no email for you"),
             "group": (group, "this is a group submission (2 students)"),
             "stranger": (_metadata(email="eve@y.org", id=99, name="Eve"),
                          "your email on Gradescope, 'eve@y.org', is not on the roster"),
             "no-metadata": (None, "submission_metadata.json is missing")}
    for name, (metadata, reason) in cases.items():
        res = G.run_autograder(G.unpack_tree(course["zip"], course["tmp"] / name, book,
                                             metadata))
        assert res["score"] == 0 and res["tests"] == [], name
        assert res["output"].startswith("Not graded: ") and reason in res["output"], res
        assert reason in res["_stdout"]   # the teacher's log says it too


def _check(root: Path):
    """setup.sh's last line: ``gradescope.run --check`` on the unpacked zip."""
    return subprocess.run([sys.executable, "-m", "gpumemlab.classroom.gradescope.run",
                           "--check"], env={"GPUMEMLAB_AUTOGRADER_ROOT": str(root),
                                            "PYTHONPATH": str(G.CHECKOUT), "PATH": "/usr/bin"},
                          capture_output=True, text=True, timeout=120)


def test_a_zip_without_its_secret_grades_nothing_and_fails_the_image_check(course):
    root = G.unpack_tree(course["zip"], course["tmp"] / "old", None, _metadata(email="bob@x.org"))
    proc = _check(root)
    assert proc.returncode == 0 and "per-student variants for 3 roster ids, matched by " \
        "Gradescope's users[].email; course secret read" in proc.stdout
    (root / "source" / "teacher" / "course.secret").unlink()
    proc = _check(root)
    assert proc.returncode == 1 and "cannot read the course secret" in proc.stdout
    res = G.run_autograder(root)
    assert res["score"] == 0 and res["output"].startswith("The autograder is misconfigured: "
                                                          "cannot read the course secret")
    config = root / "source" / "gpumemlab-autograder.json"
    settings = json.loads(config.read_text())
    settings["variants"] = None   # as a zip made before --secret existed
    config.write_text(json.dumps(settings))
    res = G.run_autograder(root)
    assert res["score"] == 0 and "has per-student variant questions (01.7, lab.oom) but no " \
        "course secret" in res["output"]
    proc = _check(root)
    assert proc.returncode == 1 and "no course secret" in proc.stdout
