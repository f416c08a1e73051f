"""One script doing what real training scripts do around the step (CPU batches from numpy,
pinning, torch.tensor on "cuda", a GRU, .item(), torch.compile, torch.save/load, a pinned
DataLoader with a worker): each stopped the planner before, each now plans, and the plan says
what it answered with made-up values."""
import json
import os
import subprocess
import sys


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(TESTS, "fixtures", "planner", "script_habits.py")


def test_a_scripts_habits_all_plan(library, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", "--json", SCRIPT,
                          str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    r = json.loads(run.stdout[run.stdout.index("{"):])
    assert run.returncode == 0, r["error"]
    assert r["fits"] is True and "done" in run.stderr and "loss 0.0000" in run.stderr
    assert r["placeholder_reads"] >= 1
    notes = " ".join(n["what"] for n in r["not_seen"])
    assert "torch.compile (1 calls): planned eagerly" in notes
    assert "values read from GPU tensors" in notes
    with open(tmp_path / "ckpt.pt", "rb") as f:
        assert f.read().startswith(b"gpumemlab plan: a checkpoint of fake tensors")
    # the GRU's weights (3 gates x (32 + 64 + 2) x 64 fp32), its gradients and AdamW's two
    # moments, and the copy torch.load made: at least 5 copies of the weights were live at once
    weights = 3 * 64 * (32 + 64 + 2) * 4
    assert r["peak_allocated_bytes"] >= 4 * weights
    assert "UserWarning" not in run.stderr
