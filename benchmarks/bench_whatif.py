"""Speed of the lessons' live what-if controls (``gml.whatif``): one update per control change.

    python benchmarks/bench_whatif.py            # lessons 05, 06, 07, 09
    python benchmarks/bench_whatif.py 05         # some

Each lesson's jupytext source (notebooks/src/NN_*.py) is run headless, as a reader runs it, and
every ``WhatIf`` it leaves behind is timed on the lesson's own workload: each combination of
control values once from a cold cache (re-run the workload, replay or simulate it, draw the
block map and the timeline, encode the PNG), then every combination again with the workload's results cached
(drawing only; a combination shown before is not even drawn again). Target (issue 10): at most 300 ms an update. Prints figures and ratios; asserts
nothing.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ["GPUMEMLAB_HEADLESS"] = "1"
# predictions and exercise attempts of the run go to a scratch file, not the learner's progress
os.environ.setdefault("GPUMEMLAB_PROGRESS", os.path.join(tempfile.mkdtemp(prefix="gml-bench-"),
                                                         "progress.json"))
TARGET_MS = 300.0
LESSONS = ("05", "06", "07", "09")


def run_lesson(key: str) -> dict:
    """Execute a lesson source headless; return its namespace."""
    source = next((ROOT / "notebooks" / "src").glob(f"{key}_*.py"))
    namespace = {"__name__": f"lesson_{key}"}
    cwd = os.getcwd()
    os.chdir(source.parent.parent)       # as the notebook runs: from notebooks/
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source.read_text(encoding="utf-8"), str(source), "exec"), namespace)
    finally:
        os.chdir(cwd)
    return namespace


def time_controls(w) -> tuple:
    """(cold, warm, cold CPU) ms lists over every combination of ``w``'s control values."""
    names = list(w.controls)
    combos = [dict(zip(names, values)) for values in itertools.product(*w.controls.values())]
    w._cache.clear()
    w._frames.clear()
    cold, warm, cpu = [], [], []
    for values in combos:
        w.update(**values)
        cold.append(w.last_ms)
        cpu.append(w.last_cpu_ms)
    w._frames.clear()   # warm: the workload's results are cached, the frames are drawn again
    for values in combos:
        w.update(**values)
        warm.append(w.last_ms)
    return cold, warm, cpu


def main(argv) -> None:
    from gpumemlab.viz.whatif import WhatIf
    keys = [a.zfill(2) for a in argv] or list(LESSONS)
    print(f"what-if updates, target {TARGET_MS:.0f} ms each")
    print("cold: workload re-run + drawing; warm: drawing a cached result; CPU: process time of a "
          "cold update (the wall time is longer when the machine is loaded)")
    print(f"{'lesson':<8}{'controls':<38}{'n':>4}{'cold median':>13}{'cold max':>10}"
          f"{'warm median':>13}{'CPU median':>12}{'CPU max':>9}{'max/target':>12}")
    for key in keys:
        namespace = run_lesson(key)
        found = [(name, v) for name, v in namespace.items() if isinstance(v, WhatIf)]
        if not found:
            print(f"{key:<8}(no gml.whatif in this lesson)")
        for name, w in found:
            cold, warm, cpu = time_controls(w)
            label = f"{name}: " + " x ".join(f"{k}({len(v)})" for k, v in w.controls.items())
            print(f"{key:<8}{label[:37]:<38}{len(cold):>4}{statistics.median(cold):>11.0f}ms"
                  f"{max(cold):>8.0f}ms{statistics.median(warm):>11.0f}ms"
                  f"{statistics.median(cpu):>10.0f}ms{max(cpu):>7.0f}ms"
                  f"{max(cold) / TARGET_MS:>11.2f}x")
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main(sys.argv[1:])
