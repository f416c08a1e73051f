"""``gpumemlab gradescope``: the autograder zip, and its real ``run_autograder`` on fake trees.

The fixture lab is packed once (its wheel built from this checkout). Its zip is unpacked into
fake ``/autograder`` trees (``GPUMEMLAB_AUTOGRADER_ROOT``) and the zip's own ``run_autograder``
runs there as Gradescope would run it, with this interpreter and checkout standing in for the
image's venv: an honest submission on time in the sandbox; a hostile one two days late (right
answers, plus a cell that tries to forge results.json and read the teacher's notebook); wrong
answers where bwrap is not on PATH (the fallback, said loudly; as root, run as nobody with an
interpreter nobody can start) with a broken metadata file; and
the runs that grade nothing or nearly (no submission, an unreadable notebook, broken settings, a
source naming an unknown question, a Python that does not start).
setup.sh cannot run here (no network): it is checked by ``bash -n`` and read.
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
import gradescope_tree as G  # noqa: E402
import make_submissions as M  # noqa: E402
from nobody_python import python_for_nobody, skip_or_fail  # noqa: E402

from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import student_version  # noqa: E402
from gpumemlab.classroom.grade import StudentResult  # noqa: E402
from gpumemlab.classroom.gradescope.metadata import MetadataError, read_times  # noqa: E402
from gpumemlab.classroom.gradescope.results import results as gs_results  # noqa: E402
from gpumemlab.cli import main  # noqa: E402

needs_sandbox = pytest.mark.skipif(
    isolation.unavailable_reason() is not None,
    reason=f"no OS sandbox here ({isolation.unavailable_reason()}); .ci/run installs bubblewrap")

SOLUTION_LINES = ["-(-size // 512) * 512", "reserved_mib = 20", "1 - max(free) / sum(free)"]
HIDDEN_TEST_LINES = ["assert_correct('01.5'", "assert_correct('01.2'", "assert_correct('02.6'"]
VISIBILITY = {"round-size-test": "visible", "reserved-test": "after_due_date",
              "frag-test": "hidden"}
DUE = datetime(2026, 12, 1, 17, 0, tzinfo=timezone.utc)
FORGED = '{"score": 100, "output": "forged", "tests": []}'


def _source_with_hidden_test(folder: Path) -> Path:
    """The fixture lab, its frag-test hidden through the cell's metadata."""
    nb = nbformat.read(str(M.SOURCE), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id")
                == "frag-test")
    cell.metadata["gpumemlab"] = {"visibility": "hidden"}
    folder.mkdir()
    nbformat.write(nb, str(folder / "lab.ipynb"))
    return folder / "lab.ipynb"


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gradescope")
    source = _source_with_hidden_test(tmp / "teacher")
    out = tmp / "lab-autograder.zip"
    status = main(["gradescope", str(source), str(out), "--late-per-day", "10%",
                   "--late-cap", "50%", "--grace", "1h", "--cell-timeout", "20",
                   "--timeout", "120", "--visibility", "reserved-test=after_due_date"])
    assert status == 0
    return {"zip": out, "source": source, "tmp": tmp}


def _members(packed) -> dict:
    with zipfile.ZipFile(packed["zip"]) as zf:
        return {i.filename: (zf.read(i), stat.S_IMODE(i.external_attr >> 16))
                for i in zf.infolist()}


def test_the_zip_holds_what_gradescope_runs(packed):
    files = _members(packed)
    wheel = [n for n in files if n.startswith("dist/")]
    assert len(wheel) == 1 and re.fullmatch(r"dist/gpumemlab-[\d.]+-py3-none-any\.whl", wheel[0])
    assert set(files) == {"setup.sh", "run_autograder", "gpumemlab-autograder.json",
                          "teacher/lab.ipynb", wheel[0]}
    assert files["setup.sh"][1] == 0o755 and files["run_autograder"][1] == 0o755
    assert files["teacher/lab.ipynb"][0] == packed["source"].read_bytes()
    config = json.loads(files["gpumemlab-autograder.json"][0])
    assert config["visibility"] == VISIBILITY
    assert config["late"] == {"per_day": 0.1, "cap": 0.5, "grace_s": 3600.0}
    assert (config["notebook"], config["cell_timeout"], config["timeout"], config["sandbox"]) \
        == ("lab.ipynb", 20, 120, "auto")
    kit = packed["tmp"] / "kit.whl"
    kit.write_bytes(files[wheel[0]][0])
    with zipfile.ZipFile(kit) as zf:   # the kit of this checkout, grader and quiz banks in it
        names = set(zf.namelist())
        assert zf.read("gpumemlab/classroom/gradescope/run.py") == \
            (ROOT / "gpumemlab/classroom/gradescope/run.py").read_bytes()
    assert any(n.startswith("gpumemlab/quizkit/banks/") for n in names)


def test_setup_sh_installs_bubblewrap_a_cpu_torch_and_the_zipped_kit(packed):
    files = _members(packed)
    for name in ("setup.sh", "run_autograder"):
        script = packed["tmp"] / name
        script.write_bytes(files[name][0])
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    setup = files["setup.sh"][0].decode()
    commands = [line for line in setup.replace("\\\n", " ").splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    apt = next(line for line in commands if "apt-get install" in line).split()
    assert {"bubblewrap", "python3-venv", "util-linux"} <= set(apt)
    torch = next(line for line in commands if "download.pytorch.org" in line)
    spec = re.search(r'"torch([^"]*)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch
    from packaging.requirements import Requirement

    req = Requirement(re.search(r"'(torch[^']*)'", torch).group(1))
    assert req.name == "torch" and str(req.specifier) == str(Requirement("torch" + spec).specifier)
    wheel = next(n for n in files if n.startswith("dist/"))
    assert any(line.strip().endswith(f'install "$here/{wheel}"') for line in commands)
    assert commands.index(torch) < next(i for i, line in enumerate(commands) if wheel in line)
    assert "gradescope.run --check" in commands[-1]


def test_no_solution_or_hidden_test_outside_the_teachers_notebook_and_the_kit(packed):
    """The kit's wheel holds the quiz layer's references; a submission never sees it whole:
    the grader installs it in the image and hands the sandbox the student kit (kit.py)."""
    source_text = packed["source"].read_text()
    for needle in SOLUTION_LINES + HIDDEN_TEST_LINES:
        assert needle in source_text     # the needles are real
    for name, (data, _) in _members(packed).items():
        if name in ("teacher/lab.ipynb",) or name.startswith("dist/"):
            continue
        text = data.decode()
        assert not [n for n in SOLUTION_LINES + HIDDEN_TEST_LINES if n in text], name


def test_a_wrong_visibility_stops_the_pack_before_anything_is_written(packed, capsys):
    out = packed["tmp"] / "bad.zip"
    assert main(["gradescope", str(packed["source"]), str(out), "--visibility",
                 "frag-test=secret"]) == 2
    assert main(["gradescope", str(packed["source"]), str(out), "--visibility",
                 "no-such-test=hidden"]) == 2
    nb = nbformat.read(str(packed["source"]), as_version=4)
    nb.cells[1].metadata["gpumemlab"] = {"visibility": "hidden"}   # not a test cell
    bad = packed["tmp"] / "bad-source"
    bad.mkdir()
    nbformat.write(nb, str(bad / "lab.ipynb"))
    assert main(["gradescope", str(bad / "lab.ipynb"), str(out)]) == 2
    err = capsys.readouterr().err
    assert "'secret' is not one of visible, hidden, after_due_date, after_published" in err
    assert "no-such-test=hidden" in err and "only read on test cells" in err
    assert not out.exists() and not list(packed["tmp"].glob(".bad.zip*"))


def test_a_given_dist_is_shipped_as_it_is(packed, capsys):
    files = _members(packed)
    name = next(n for n in files if n.startswith("dist/"))
    given = packed["tmp"] / "given" / name.split("/")[1]
    given.parent.mkdir()
    given.write_bytes(files[name][0])
    out = packed["tmp"] / "given.zip"
    assert main(["gradescope", str(packed["source"]), str(out), "--dist", str(given)]) == 0
    with zipfile.ZipFile(out) as zf:
        assert zf.read(name) == given.read_bytes()
    renamed = packed["tmp"] / "given" / "kit.whl"
    renamed.write_bytes(given.read_bytes())
    assert main(["gradescope", str(packed["source"]), str(packed["tmp"] / "x.zip"),
                 "--dist", str(renamed)]) == 2
    assert main(["gradescope", str(packed["source"]), str(packed["tmp"] / "x.tar")]) == 2
    err = capsys.readouterr().err
    assert "expected a gpumemlab wheel" in err and "must be a .zip file" in err
    assert not (packed["tmp"] / "x.zip").exists() and not (packed["tmp"] / "x.tar").exists()


# ---- the real run_autograder on fake /autograder trees ----

def _tree(packed, name, notebook=None, metadata=None) -> Path:
    return G.unpack_tree(packed["zip"], packed["tmp"] / name, notebook, metadata)


def _metadata(submitted: datetime) -> dict:
    local = timezone(timedelta(hours=-7))   # Gradescope writes the course's own offset
    return {"id": 123456, "created_at": submitted.astimezone(local).isoformat(),
            "assignment": {"due_date": DUE.astimezone(local).isoformat(),
                           "late_due_date": None, "title": "Lab", "total_points": "5.0"},
            "users": [{"email": "s@example.org", "id": 1, "name": "S"}],
            "previous_submissions": []}


_run_autograder = G.run_autograder


def _student():
    return student_version(nbformat.read(str(M.SOURCE), as_version=4))


def _rows(results) -> dict:
    return {t["name"]: (t["score"], t["max_score"], t["status"], t["visibility"],
                        t["output_format"]) for t in results["tests"]}


def _check_shape(results):
    assert (results["output_format"], results["test_output_format"]) == ("text", "text")
    assert set(VISIBILITY) == {t["name"] for t in results["tests"]}
    for needle in SOLUTION_LINES + HIDDEN_TEST_LINES:
        assert needle not in json.dumps(results)


@needs_sandbox
def test_an_honest_submission_on_time_gets_every_point_in_the_sandbox(packed):
    root = _tree(packed, "honest", M.answered(_student(), M.RIGHT),
                 _metadata(DUE - timedelta(hours=3)))
    res = _run_autograder(root)
    _check_shape(res)
    assert res["score"] == 5
    assert _rows(res) == {"round-size-test": (2, 2, "passed", "visible", "text"),
                          "reserved-test": (1, 1, "passed", "after_due_date", "text"),
                          "frag-test": (2, 2, "passed", "hidden", "text")}
    assert res["extra_data"] == {"raw_score": 5, "late_penalty": 0, "isolated": True}
    assert "NOT ISOLATED" not in res["output"] and "late" not in res["output"]
    assert res["output"].startswith("score: 5 / 5")


@needs_sandbox
def test_a_hostile_submission_two_days_late_loses_the_late_penalty_and_forges_nothing(packed):
    # Python's open() is refused under the tree by the grader's audit hook even without the
    # sandbox; libc's open() through ctypes is not: only the OS sandbox stops these
    nb = M.add_cell_after(M.answered(_student(), M.RIGHT), "frag-answer", (
        "import ctypes\n"
        "libc = ctypes.CDLL(None)\n"
        f"root = {str(packed['tmp'] / 'hostile')!r}\n"
        f"for name, data in (('/results/results.json', {FORGED!r}),\n"
        "                   ('/results/stolen.txt', 'x'), ('/source/teacher/lab.ipynb', 'x')):\n"
        "    fd = libc.open((root + name).encode(), 0o2101, 0o644)  # write, create, append\n"
        "    print(name, 'blocked' if fd < 0 else libc.write(fd, data.encode(), len(data)))\n"
        "print('round-size-test passed\\nscore: 100 / 5')"))
    root = _tree(packed, "hostile", nb, _metadata(DUE + timedelta(days=1, hours=20)))
    before = (root / "source" / "teacher" / "lab.ipynb").read_bytes()
    res = _run_autograder(root)
    _check_shape(res)
    # 44 h after the due date (past the 1 h grace): 2 started days, 20% of 5 points
    assert res["score"] == 4 and res["extra_data"] == {"raw_score": 5, "late_penalty": 1,
                                                        "isolated": True}
    assert [t["status"] for t in res["tests"]] == ["passed"] * 3
    assert res["output"].startswith("score: 4 / 5 (tests 5, late penalty -1)")
    assert "2 days late, 20% of the maximum, -1 point" in res["output"]
    assert "forged" not in json.dumps(res)
    assert sorted(p.name for p in (root / "results").iterdir()) == ["results.json"]
    assert (root / "source" / "teacher" / "lab.ipynb").read_bytes() == before


def _path_without_bwrap(tmp: Path) -> str:
    """A PATH with every program of /usr/bin but bwrap: the container without bubblewrap."""
    bin_dir = tmp / "bin-without-bwrap"
    if not bin_dir.is_dir():
        bin_dir.mkdir()
        for prog in Path("/usr/bin").iterdir():
            if prog.name != "bwrap":
                (bin_dir / prog.name).symlink_to(prog)
    return f"{bin_dir}:/usr/local/bin:/usr/sbin"


@pytest.fixture(scope="module")
def nobody_python():
    """An interpreter nobody can start (root only), in a folder every user may traverse. As
    root, none is a failure: without one, a root grader grades nothing without the sandbox."""
    if os.geteuid() != 0:
        yield None
        return
    if shutil.which("setpriv") is None:
        skip_or_fail("setpriv is not installed")
    folder = Path(tempfile.mkdtemp(prefix="gml-nobody-python-"))
    try:
        os.chmod(folder, 0o755)
        python = python_for_nobody(folder)
        if python is None:
            skip_or_fail("no interpreter here that an unprivileged user can start")
        yield python
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_without_bubblewrap_wrong_answers_are_graded_and_the_results_say_so(packed,
                                                                             nobody_python):
    root = _tree(packed, "fallback", M.answered(_student(), M.WRONG), '{"created_at": NaN}')
    res = _run_autograder(root, path=_path_without_bwrap(packed["tmp"]),
                          python=nobody_python or sys.executable)
    _check_shape(res)
    assert res["score"] == 0 and res["extra_data"]["isolated"] is False
    assert _rows(res) == {"round-size-test": (0, 2, "failed", "visible", "text"),
                          "reserved-test": (0, 1, "failed", "after_due_date", "text"),
                          "frag-test": (0, 2, "failed", "hidden", "text")}
    first = res["output"].splitlines()[0]
    assert first.startswith("NOT ISOLATED") and "bwrap is not installed" in first
    if nobody_python is not None:   # root: the notebook ran as nobody, the tree locked down
        assert "as an unprivileged user of its own" in first and "AS ROOT" not in first
        assert {stat.S_IMODE(os.stat(root / n).st_mode) for n in ("source", "results")} \
            == {0o700}
        assert stat.S_IMODE(os.stat(root / "submission_metadata.json").st_mode) == 0o600
    assert "late policy NOT applied: submission_metadata.json is not JSON" in res["output"]
    assert "NOT ISOLATED" in res["_stdout"]   # the teacher's log says it too


def _check(root: Path, path=None, python=sys.executable):
    """setup.sh's last line: ``gradescope.run --check`` on the unpacked zip."""
    env = dict(os.environ, GPUMEMLAB_AUTOGRADER_ROOT=str(root), PYTHONPATH=str(ROOT))
    if path is not None:
        env["PATH"] = path
    return subprocess.run([str(python), "-m", "gpumemlab.classroom.gradescope.run",
                           "--check"], env=env, capture_output=True, text=True, timeout=120)


def test_no_submission_or_an_unreadable_one_still_writes_results_with_the_reason(packed,
                                                                                nobody_python):
    # as root, an interpreter an unprivileged user can start: else nothing is graded at all
    # (test_gradescope_root_runs)
    python = nobody_python or sys.executable
    root = _tree(packed, "empty", None, _metadata(DUE))
    res = _run_autograder(root, path=_path_without_bwrap(packed["tmp"]), python=python)
    assert res["score"] == 0 and [t["score"] for t in res["tests"]] == [0, 0, 0]
    assert "no submission folder was found" in res["output"]
    proc = _check(root, path=_path_without_bwrap(packed["tmp"]), python=python)
    assert proc.returncode == 0 and "lab (lab.ipynb); settings read" in proc.stdout
    assert "sandbox: UNAVAILABLE here (bwrap is not installed" in proc.stdout
    if nobody_python is not None:   # and without it, the notebook would run as a uid of its own
        assert "without the sandbox, notebooks run as an unprivileged user" in proc.stdout

    root = _tree(packed, "garbage", None, _metadata(DUE))
    (root / "submission").mkdir()
    (root / "submission" / "lab.ipynb").write_text("{not json")
    res = _run_autograder(root, path=_path_without_bwrap(packed["tmp"]), python=python)
    assert res["score"] == 0 and [t["status"] for t in res["tests"]] == ["failed"] * 3
    assert "could not read the notebook" in res["output"]


def test_broken_settings_a_broken_source_or_a_dead_python_still_write_results(packed):
    root = _tree(packed, "broken", M.answered(_student(), M.RIGHT), _metadata(DUE))
    (root / "source" / "gpumemlab-autograder.json").write_text('{"format": "x"}')
    res = _run_autograder(root)
    assert res["score"] == 0 and res["tests"] == []
    assert res["output"].startswith("The autograder is misconfigured: not a "
                                    "gpumemlab-gradescope/1 settings file")
    assert "not a problem with your submission" in res["output"]

    proc = _check(root)   # the image build stops here, before any student submits
    assert proc.returncode == 1 and "misconfigured" in proc.stdout

    (root / "source" / "gpumemlab-autograder.json").write_text(
        _members(packed)["gpumemlab-autograder.json"][0].decode())
    teacher = root / "source" / "teacher" / "lab.ipynb"
    teacher.write_text(teacher.read_text().replace("'02.6'", "'99.9'"))
    res = _run_autograder(root)
    assert res["score"] == 0 and res["tests"] == []
    assert res["output"].startswith("The autograder's notebook lab.ipynb cannot be used: ")
    assert "unknown question '99.9'" in res["output"]
    assert _check(root).returncode == 1

    res = _run_autograder(root, python="/bin/false")   # nothing of the kit ever ran
    assert res["score"] == 0 and res["tests"] == []
    assert "The autograder itself failed (exit status 1)" in res["output"]


# ---- the parts, without a kernel ----

def test_metadata_is_read_as_untrusted(tmp_path):
    path = tmp_path / "submission_metadata.json"
    path.write_text(json.dumps(_metadata(DUE + timedelta(minutes=5))))
    times = read_times(path)
    assert times.submitted == DUE + timedelta(minutes=5) and times.due == DUE
    meta = _metadata(DUE)
    meta["users"][0]["assignment"] = {"due_date": "2026-12-03T17:00:00Z"}   # an extension
    path.write_text(json.dumps(meta))
    assert read_times(path).due == DUE + timedelta(days=2) and read_times(path).extended
    bad = {"[1, 2]": "not a JSON object", '{"created_at": NaN}': "NaN is not JSON",
           '{"created_at": 1e999}': "created_at must be text, not float",
           "[" * 100000: "not JSON", json.dumps({"created_at": "soon"}): "created_at 'soon'",
           json.dumps({"created_at": "2026-12-01T00:00:00Z"}): "no assignment object",
           "\xff": "not UTF-8 text"}
    for text, why in bad.items():
        path.write_text(text, encoding="latin-1")
        with pytest.raises(MetadataError, match=re.escape(why)):
            read_times(path)
    path.unlink()
    os.mkfifo(path)   # would block a plain open() forever
    with pytest.raises(MetadataError, match="not a regular file"):
        read_times(path)
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(MetadataError, match="cannot be opened"):
        read_times(path)


def test_notes_name_no_test_that_is_not_shown_yet():
    result = StudentResult("s", [{"name": gid, "score": 0.0, "max_score": 1.0,
                                  "status": "failed", "output": "x"} for gid in VISIBILITY],
                           0.0, 3.0, 1.0, notes=["a test cell (frag-test) stopped: timeout; it "
                                                 "was skipped and the rest re-run",
                                                 "reserved-test: fine"])
    out = gs_results(result, VISIBILITY)["output"]
    assert "frag-test" not in out and "reserved-test" not in out
    assert "a test cell (a test not shown yet) stopped" in out
