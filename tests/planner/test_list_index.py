"""Indexing a device tensor with a list of ints (minGPT chargpt's ``t[:, [-1]]``) made its index on
the device inside C++, out of the fake mode's sight, and stopped the plan; now it plans, with the
results' true shapes."""
import json
import os
import subprocess
import sys


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(TESTS, "fixtures", "planner", "list_index.py")


def test_a_list_index_on_a_cuda_tensor_plans(library):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", "--json", SCRIPT],
                         env=env, capture_output=True, text=True, timeout=300)
    r = json.loads(run.stdout[run.stdout.index("{"):])
    assert run.returncode == 0, r["error"]
    assert r["fits"] is True and r["stopped_at"] is None
    assert "shapes (4, 1, 256) (2, 16, 256)" in run.stderr
    # the input (4*16*256 fp32 = 64 KiB) and both results (4 KiB, 32 KiB) are live at the end
    assert r["peak_allocated_bytes"] >= (4 * 16 * 256 + 4 * 256 + 2 * 16 * 256) * 4
