"""The command-line conventions people expect: ``--version``, a bare ``gpumemlab`` that helps,
``--json`` on every reading command, and a progress line on a terminal only (never under
``--quiet``, never into a pipe)."""
import io
import json
import os
import pathlib
import pty
import select
import subprocess
import sys
import time

import pytest

from gpumemlab.cli import main
from gpumemlab.cli.progress import LineSink, Ticker, wanted

ROOT = pathlib.Path(__file__).resolve().parents[2]
SNAPS = ROOT / "tests" / "fixtures" / "snapshots"
OOM = SNAPS / "sim_fragmentation_oom.pickle"
STEP = SNAPS / "sim_train_step_like.pickle"


def _cli(*args, **kw):
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1")
    return subprocess.run([sys.executable, "-m", "gpumemlab.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600, **kw)


def test_version_and_a_bare_command():
    from importlib.metadata import version

    run = _cli("--version")
    assert run.returncode == 0 and run.stdout.strip() == f"gpumemlab {version('gpumemlab')}"
    run = _cli()
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: gpumemlab") and "selftest" in run.stdout
    assert run.stderr == ""


def test_selftest_help_has_no_rst_markup():
    run = _cli("selftest", "--help")
    assert run.returncode == 0 and "``" not in run.stdout and "Exit status 0" in run.stdout


def test_report_json_is_the_texts_figures(capsys):
    assert main(["report", str(STEP), "--json", "--top", "3", "--range", "0:20"]) == 0
    out = capsys.readouterr().out
    r = json.loads(out)
    assert r["segments"]["total"] == r["segments"]["small"] + r["segments"]["large"]
    assert r["cached_free_bytes"] == r["reserved_bytes"] - r["allocated_bytes"]
    assert len(r["largest_live"]) == 3
    sizes = [b["size"] for b in r["largest_live"]]
    assert sizes == sorted(sizes, reverse=True)
    assert r["range"]["start"] == 0 and r["range"]["end"] == 20
    assert sum(r["range"]["actions"].values()) == 20
    assert main(["report", str(STEP), "--top", "3"]) == 0
    text = capsys.readouterr().out
    from gpumemlab.units import format_size
    assert f"reserved {format_size(r['reserved_bytes'])}," in text


def test_verify_json_and_exit_status(capsys):
    assert main(["verify", str(OOM), "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["verified"] is True and v["devices"][0]["alloc_mismatches"] == 0
    assert v["devices"][0]["oom"] == {"entry": v["devices"][0]["entries"] - 1, "recorded": True}


def test_replay_json_rows(capsys):
    assert main(["replay", str(OOM), "--json", "--alloc-conf", "expandable_segments:True"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"]
    assert [r["settings"] for r in rows] == ["recorded", "expandable_segments:True"]
    assert rows[0]["oom_entry"] is not None and rows[1]["oom_entry"] is None   # the lesson-06 fix
    assert all(r["peak_reserved_bytes"] >= r["peak_allocated_bytes"] for r in rows)


def test_diff_json(capsys):
    assert main(["diff", str(OOM), str(STEP), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    moved = sum(r["bytes_b"] - r["bytes_a"] for k in ("grew", "shrank", "new", "gone")
                for r in d[k])
    assert moved == d["total_b_bytes"] - d["total_a_bytes"]


def test_stats_json(tmp_path, capsys):
    grades = tmp_path / "grades.csv"
    head = "assignment,duedate,timestamp,student_id,last_name,first_name,email,raw_score," \
           "late_submission_penalty,score,max_score\n"
    rows = [f"{a},,,{s},,,,{sc},0,{sc},2\n" for s, scores in
            (("ann", (2, 0)), ("bob", (2, 2)), ("cat", (0, 0)), ("dan", (2, 1)))
            for a, sc in zip(("ps1", "ps2"), scores)]
    grades.write_text(head + "".join(rows))
    assert main(["stats", str(grades), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["n_students"] == 4 and [i["item"] for i in s["items"]] == ["ps1", "ps2"]
    assert s["items"][0]["difficulty"] == pytest.approx(0.75)
    assert (tmp_path / "stats.csv").is_file() and (tmp_path / "stats.html").is_file()


# -- progress --

class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_the_ticker_draws_on_a_terminal_and_clears_after():
    err = FakeTTY()
    with Ticker("grade", err, on=True, every=0.05) as tick:
        sink = LineSink(tick, "graded")
        print("[1/2] ann: 2/2 in 1.0 s", file=sink)
        time.sleep(0.2)
    text = err.getvalue()
    assert text.startswith("\r\x1b[Kgrade ... 0 s")
    assert "[1/2] ann: 2/2 in 1.0 s\n" in text and "grade ... 1 graded" in text
    assert text.count("\r\x1b[Kgrade ...") >= 3          # redrawn while the step runs
    assert text.endswith("\r\x1b[K")                      # and gone when it ends


def test_no_progress_when_quiet_or_not_a_terminal():
    class Args:
        quiet = False
    assert wanted(Args(), FakeTTY()) and not wanted(Args(), io.StringIO())
    Args.quiet = True
    assert not wanted(Args(), FakeTTY())
    err = io.StringIO()
    with Ticker("x", err, on=False) as tick:
        tick.update("1 done")
        tick.line("hidden")
    assert err.getvalue() == ""


def _stderr_on_a_pty(*args):
    """Run the command with stderr on a pseudo-terminal; -> (exit status, what it drew)."""
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg", GPUMEMLAB_HEADLESS="1")
    proc = subprocess.Popen([sys.executable, "-m", "gpumemlab.cli", *args], stdout=subprocess.PIPE,
                            stderr=slave, env=env)
    os.close(slave)
    drawn = b""
    while True:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
        elif proc.poll() is not None:
            break
    proc.stdout.read()
    os.close(master)
    return proc.wait(timeout=60), drawn.decode(errors="replace")


@pytest.mark.slow
def test_selftest_shows_progress_on_a_terminal_only():
    rc, drawn = _stderr_on_a_pty("selftest", "--device", "sim", "--only", "cache_reuse")
    assert rc == 0 and "selftest: 1 scenarios on sim ..." in drawn
    rc, drawn = _stderr_on_a_pty("selftest", "--device", "sim", "--only", "cache_reuse", "--quiet")
    assert rc == 0 and "selftest:" not in drawn
    run = _cli("selftest", "--device", "sim", "--only", "cache_reuse")
    assert run.returncode == 0 and "\r" not in run.stderr and "selftest:" not in run.stderr


@pytest.mark.slow
def test_plan_shows_progress_and_exits_1_when_it_does_not_fit():
    script = ROOT / "tests" / "fixtures" / "planner" / "profile_mlp.py"
    rc, drawn = _stderr_on_a_pty("plan", "--total-memory", "600MiB", "--context", "512MiB",
                                 str(script), "--width", "2048", "--steps", "2")
    assert rc == 1 and "plan: running profile_mlp.py ..." in drawn


def test_grade_json_holds_each_students_scores(tmp_path):
    from gpumemlab.classroom.grade import StudentResult
    from gpumemlab.cli.classroom import _grades_json

    tests = [{"name": "t1", "score": 1.0, "max_score": 2.0, "status": "fail", "output": "secret"}]
    late = StudentResult("ann", tests, 1.0, 2.0, 0.5, timestamp="2026-12-02T10:00Z", penalty=0.2)
    j = json.loads(json.dumps(_grades_json([late], "ps1", tmp_path / "grades.csv", tmp_path / "fb")))
    s, = j["students"]
    assert (s["student_id"], s["score"], s["late_penalty"], s["final_score"]) == ("ann", 1.0, 0.2, 0.8)
    assert s["tests"] == [{"name": "t1", "score": 1.0, "max_score": 2.0, "status": "fail"}]
    assert j["items"] == str(tmp_path / "items.csv")
