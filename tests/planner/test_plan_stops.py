"""A plan that stops says so: ``fits`` is null (the peaks are partial), the script's own error is
reported as the script's with the frame where it stopped, not as a fake-tensor failure."""
import json
import os
import subprocess
import sys


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(TESTS, "fixtures", "planner", "missing_folder.py")


def _plan(*args):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    return subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_scripts_own_error_is_its_own_and_fits_is_null(library):
    run = _plan("--json", FIXTURE)
    assert run.returncode == 2
    r = json.loads(run.stdout)
    assert r["fits"] is None and r["oom"] is None
    assert r["error"].startswith("the script raised FileNotFoundError")
    assert "fake tensors" not in r["error"]
    assert os.path.samefile(r["stopped_at"]["file"], FIXTURE) and r["stopped_at"]["line"] == 6
    assert r["peak_allocated_bytes"] >= 2 * 256 * 256 * 4     # x and its gradient were made


def test_the_text_verdict_of_a_stopped_plan_is_not_known(library):
    run = _plan(FIXTURE)
    assert run.returncode == 2
    assert "not known: the script stopped before the end" in run.stdout
    assert "fits" not in run.stdout.split("not known")[0].split("\n")[-1]
    assert "Traceback" not in run.stderr and "UserWarning" not in run.stderr


EXITS = os.path.join(TESTS, "fixtures", "planner", "exits_nonzero.py")


def test_a_non_zero_exit_is_the_scripts_stop_not_a_fit(library):
    run = _plan("--json", EXITS)
    assert run.returncode == 2
    r = json.loads(run.stdout)
    assert r["fits"] is None and r["exit_status"] == 1
    assert r["error"] == "the script exited with status 1 at exits_nonzero.py:11 in <module>"
    assert os.path.samefile(r["stopped_at"]["file"], EXITS) and r["stopped_at"]["line"] == 11
    assert r["peak_allocated_bytes"] >= 2 * 256 * 256 * 4
    text = _plan(EXITS)
    assert "not known: the script stopped before the end" in text.stdout
    assert "exit status 1" in text.stdout and "exited with status 1" in text.stderr


LOOPS = os.path.join(TESTS, "fixtures", "planner", "loops_forever.py")


def test_a_script_that_loops_forever_stops_at_the_time_limit_and_says_so(library):
    run = _plan("--json", "--time-limit", "4", LOOPS)
    assert run.returncode == 2
    r = json.loads(run.stdout)
    assert r["fits"] is None and r["time_limit_s"] == 4
    assert r["error"].startswith("the plan ran past its time limit of 4 s at loops_forever.py:")
    assert os.path.samefile(r["stopped_at"]["file"], LOOPS) and r["stopped_at"]["line"] in (17, 18)
    assert r["peak_allocated_bytes"] >= 2 * 512 * 512 * 4


def test_the_time_limit_stops_a_backward_of_many_operators(library):
    # the limit is reached on autograd's own thread or in the forward: either way the script's
    # own frame where it was is named, and the count of operators run so far
    run = _plan("--json", "--time-limit", "6", LOOPS, "--backward")
    r = json.loads(run.stdout)
    assert r["fits"] is None and run.returncode == 2, r["error"]
    assert r["error"].startswith("the plan ran past its time limit of 6 s at loops_forever.py:")
    assert r["stopped_at"]["line"] in (14, 15) and r["operators"] > 100
    assert "operators run on fake tensors so far" in r["error"]
