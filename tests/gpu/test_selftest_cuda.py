"""gpumemlab selftest on the real card: every lesson scenario, each in a fresh child process,
compared equal with the model's prediction."""
import json
import subprocess
import sys
from pathlib import Path

from gpumemlab.lessons import selftest as st

ROOT = Path(__file__).resolve().parents[2]


def test_every_scenario_compares_equal_on_the_card():
    report = st.selftest("cuda")
    assert report["cuda"] is True
    different = {s["name"]: s["differences"] for s in report["scenarios"] if not s["equal"]}
    assert different == {}


def test_cli_json_on_the_card():
    done = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "selftest", "--device", "cuda",
                           "--json", "--only", "fragmentation_oom", "cache_reuse"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    assert report["cuda"] is True and all(s["compared"] for s in report["scenarios"])
    assert done.returncode == (0 if all(s["equal"] for s in report["scenarios"]) else 1)
