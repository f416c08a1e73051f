"""``torch.allclose``/``torch.equal`` of fake tensors under ``gpumemlab plan``: they return a
Python bool, a value fake tensors do not have, and stopped the script as a data-dependent
operation; they now answer True (``equal`` of different shapes False), counted as placeholder
reads like ``.item()``."""
import json
import os
import subprocess
import sys


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(TESTS, "fixtures", "planner", "compares_gradients.py")


def test_comparisons_answer_and_are_counted(library):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", "--json", SCRIPT],
                         env=env, capture_output=True, text=True, timeout=300)
    r = json.loads(run.stdout[run.stdout.index("{"):])
    assert run.returncode == 0, r["error"]
    assert "match True True False" in run.stderr
    assert r["placeholder_reads"] == 3
    assert "values read from GPU tensors (3 reads" in " ".join(n["what"] for n in r["not_seen"])
