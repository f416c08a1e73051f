"""The parts of the grader's isolation that need no kernel, and the --no-sandbox path."""
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
TESTS = Path(__file__).resolve().parents[1]
import make_submissions as M  # noqa: E402

from gpumemlab.classroom import isolation  # noqa: E402
from gpumemlab.classroom.build import build_graded, student_version  # noqa: E402
from gpumemlab.classroom.build import test_parts as parts_of  # noqa: E402
from gpumemlab.classroom.cells import NotebookFormatError  # noqa: E402
from gpumemlab.classroom.intake import safe_name  # noqa: E402
from gpumemlab.classroom.verdicts import Judge, plan, split_test, verdict  # noqa: E402
from gpumemlab.classroom.kit import prepare_kit  # noqa: E402
from gpumemlab.classroom.reports import cell_text  # noqa: E402
from gpumemlab.cli import main  # noqa: E402


def source():
    return nbformat.read(str(M.SOURCE), as_version=4)


def test_judge_calls_leave_the_test_cell_and_other_statements_stay():
    inside, judges = split_test("assert f(1) == 2\ngml.quiz.assert_correct('01.5', f)\nx = 1",
                                "cell")
    assert judges == [Judge("01.5", "f")]
    assert inside == "assert f(1) == 2\nx = 1"
    for bad in ("if True:\n    gml.quiz.assert_correct('01.5', f)",
                "gml.quiz.assert_correct('01.5', f(1))", "y = gml.quiz.assert_correct('01.5', f)"):
        with pytest.raises(NotebookFormatError, match="assert_correct"):
            split_test(bad, "cell")


def test_the_built_notebook_holds_no_key_judge_or_hidden_check():
    src = source()
    parts = parts_of(src)
    rng = random.Random(1)
    requests = {gid: [plan(j, rng) for j in js] for gid, (_, js) in parts.items()}
    built = build_graded(src, M.answered(student_version(src), M.WRONG), home="/home/student",
                         deny_roots=[], key=b"k" * 32, token="t" * 16, kit="/opt/kit",
                         requests=requests)
    text = nbformat.writes(built)
    assert "assert_correct" not in text and "01.5" in text   # the id goes in, the check not
    assert "max(512, -(-size // 512) * 512)" not in text     # nor the source's solution
    assert len(requests["round-size-test"][0]["probes"]) > 57   # edges + seeded + fresh cases


def test_fresh_probes_differ_between_submissions():
    j = Judge("01.5", "round_size")
    a, b = plan(j, random.Random(1))["probes"], plan(j, random.Random(2))["probes"]
    assert a[:57] == b[:57] and a[57:] != b[57:]


@pytest.mark.parametrize("reply", [None, [], {"ok": "yes"}, {"ok": True}, {"ok": True, "calls": 3},
                                   {"ok": True, "calls": [{"value": 512}]},
                                   {"ok": True, "calls": [[]] * 200},
                                   {"ok": True, "calls": [{"error": "x" * 10**5}]},
                                   {"ok": False, "error": {"deep": [1]}}])
def test_a_malformed_reply_fails_with_a_message_and_never_raises(reply):
    request = plan(Judge("01.5", "round_size"), random.Random(0))
    passed, message = verdict(request, reply, "seed")
    assert passed is False and message and len(message) < 700


def test_plain_right_answers_pass_outside():
    request = plan(Judge("01.5", "round_size"), random.Random(0))
    calls = [{"value": max(512, -(-a[0] // 512) * 512)} for a in request["probes"]]
    assert verdict(request, {"ok": True, "calls": calls}, "s") == (True, "")
    assert verdict(plan(Judge("01.2", "reserved_mib"), random.Random(0)),
                   {"ok": True, "value": 20}, "s")[0]


def test_the_student_kit_withholds_answers_and_keeps_the_rest(tmp_path):
    prepare_kit(tmp_path, {"viz/metrics.py"})
    code = ("import gpumemlab as g, sys\nprint(g.KiB)\n"
            "for m in ('gpumemlab.quizkit', 'gpumemlab.quizkit.exercises', "
            "'gpumemlab.viz.metrics', 'gpumemlab.classroom.grade',"
            " 'gpumemlab.certificates'):\n"
            "    try:\n        __import__(m)\n        print('IMPORTED', m)\n"
            "    except ImportError as e:\n        print('withheld', m, '|', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(tmp_path), "PATH": os.environ["PATH"]},
                         cwd=tmp_path).stdout
    assert out.startswith("1024\n") and "IMPORTED" not in out
    assert "asks you to write what it computes" in out and "stay with the grader" in out
    assert not list(tmp_path.rglob("*.yaml"))   # no question bank either
    assert (tmp_path / "gpumemlab" / "classroom" / "runner.py").is_file()   # runs inside


def test_csv_cells_and_feedback_names():
    assert cell_text("=1+1") == "'=1+1" and cell_text("-2") == "'-2" and cell_text("ok") == "ok"
    assert cell_text(os.fsdecode(b"a\xff")) == "a\\xff"
    names = {safe_name(n) for n in ("a b", "a_b", "a?b", os.fsdecode(b"a\xffb"), "..x", "x")}
    assert len(names) == 6 and all("/" not in n and not n.startswith(".") for n in names)


def test_grade_refuses_without_a_sandbox_unless_told(tmp_path, monkeypatch, capsys):
    subs = tmp_path / "subs" / "right"
    subs.mkdir(parents=True)
    student = student_version(source())
    nbformat.write(M.answered(student, M.RIGHT), str(subs / "lab.ipynb"))
    monkeypatch.setattr(isolation, "unavailable_reason", lambda: "bwrap is not installed")
    args = ["grade", str(tmp_path / "subs"), "--source", str(M.SOURCE),
            "--out", str(tmp_path / "out" / "grades.csv"), "--cell-timeout", "60"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "bwrap is not installed" in err and "--no-sandbox" in err
    # as root, where this Python is out of an unprivileged user's reach (under /root), the run
    # goes on only as root, which must be asked for (test_root_runs)
    root_runs = ["--allow-root-runs"] if os.geteuid() == 0 else []
    assert main(args + ["--no-sandbox"] + root_runs) == 0
    text = (tmp_path / "out" / "feedback" / "right" / "feedback.txt").read_text()
    assert "NOT ISOLATED" in text and "score: 5 / 5" in text


@pytest.mark.skipif(isolation.unavailable_reason() is not None, reason="no OS sandbox here")
def test_a_test_without_a_judge_is_marked_checked_inside(tmp_path):
    import copy
    import json

    src = source()
    cell = copy.deepcopy(next(c for c in src.cells
                              if c.metadata.get("nbgrader", {}).get("grade_id") == "reserved-test"))
    cell.metadata["nbgrader"]["grade_id"] = "trusting-test"
    cell.source = "assert reserved_mib * 2 == 40"   # nbgrader style: no judge
    cell["id"] = "trusting-test-cell"
    src.cells.append(cell)
    from gpumemlab.lessons import all_exercises

    ex = next(iter(all_exercises()))   # a lesson exercise, its stub sent by a function
    src.cells.append(nbformat.v4.new_code_cell(f"stub_answer = lambda: {ex.stub!r}"))
    judged = copy.deepcopy(cell)
    judged.metadata["nbgrader"]["grade_id"] = "exercise-test"
    judged.source = f"gml.exercise.assert_passes({ex.id!r}, stub_answer)"
    judged["id"] = "exercise-test-cell"
    src.cells.append(judged)
    nbformat.write(src, str(tmp_path / "lab.ipynb"))
    (tmp_path / "subs" / "s").mkdir(parents=True)
    nbformat.write(M.answered(student_version(src), M.RIGHT), str(tmp_path / "subs" / "s" /
                                                                  "lab.ipynb"))
    out = tmp_path / "out" / "grades.csv"
    assert main(["grade", str(tmp_path / "subs"), "--source", str(tmp_path / "lab.ipynb"),
                 "--out", str(out), "--cell-timeout", "60"]) == 0
    feedback = (tmp_path / "out" / "feedback" / "s")
    assert "[PASS] trusting-test: 1 / 1 (checked inside the submission)" in \
        (feedback / "feedback.txt").read_text()
    assert "[PASS] reserved-test: 1 / 1\n" in (feedback / "feedback.txt").read_text()
    tests = {t["name"]: t for t in json.loads((feedback / "results.json").read_text())["tests"]}
    assert tests["trusting-test"]["output"].startswith("(checked inside the submission)")
    assert tests["trusting-test"]["score"] == 1
    assert tests["exercise-test"]["score"] == 0 and \
        tests["exercise-test"]["output"].startswith(ex.id), tests["exercise-test"]


def test_lesson_exercises_are_judged_outside_too():
    from gpumemlab.lessons import all_exercises

    ex = next(iter(all_exercises()))
    inside, judges = split_test(f"gml.exercise.assert_passes({ex.id!r}, answer)", "cell")
    assert inside == "" and judges == [Judge(ex.id, "answer", "exercise")]
    request = plan(judges[0], random.Random(0))
    assert request["call_if_callable"] and request["probes"] is None
    passed, message = verdict(request, {"ok": True, "value": ex.stub}, "s")
    assert passed is False and message.startswith(ex.id)


def test_intake_copies_folders_and_regular_files_only(tmp_path):
    from gpumemlab.classroom import intake

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a")
    (src / "sub" / "b.txt").write_text("b")
    os.mkfifo(src / "fifo")
    (src / "link").symlink_to("/etc/passwd")
    for i in range(intake.COPY_LIMIT_FILES):
        (src / "sub" / f"f{i}").write_text("x")
    notes = intake.copy_submission(src, tmp_path / "dst")
    kept = [p for p in (tmp_path / "dst").rglob("*") if p.is_file()]
    assert len(kept) == intake.COPY_LIMIT_FILES and (tmp_path / "dst" / "a.txt").is_file()
    assert not any(p.is_symlink() for p in (tmp_path / "dst").rglob("*"))
    assert "4 links, special files or files over the limits" in notes[0]
