"""``torch.cuda.Event`` timing under ``gpumemlab plan``: it answered 0 ms, and a benchmark that
divides by its measured time (a throughput, a speed-up) stopped on ZeroDivisionError; an interval
is now the host's time between the two records, as ``time.time()`` differences are."""
import json
import os
import subprocess
import sys


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(TESTS, "fixtures", "planner", "event_timing.py")


def test_a_script_dividing_by_its_event_time_plans(library):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", "--json", SCRIPT],
                         env=env, capture_output=True, text=True, timeout=300)
    r = json.loads(run.stdout[run.stdout.index("{"):])
    assert run.returncode == 0, r["error"]
    assert r["fits"] is True and "throughput " in run.stderr
    rate = float(run.stderr.split("throughput ")[1].split()[0])
    assert rate > 0
