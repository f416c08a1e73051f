"""Real recordings: the load check's cost grows with the file, and ``doctor --json`` costs what
the text doctor costs (issue 29).

Run: python benchmarks/bench_real_recordings.py [--sizes-mb 25,100] [--repeats 3]

* json vs text: ``gpumemlab doctor FILE`` and ``gpumemlab doctor --json FILE`` on the largest
  real fixture in tests/fixtures/real/, as whole processes, interleaved, best of N each; the
  ratio json/text (target <= 1.2: the JSON form writes its fields, no deep copy of the views).
  The ratio to a plain ``pickle.loads`` of the same bytes at each size separates the kit's
  checks from what memory does to any loader at scale.
* load: files of about each size made from a real fixture's shape (its trace entries repeated as
  new dicts that keep sharing the recording's frame lists, as PyTorch's writer shares them), then
  ``load_snapshot`` timed on each; seconds per MB for each size and their ratio (linear: ~1).
"""
from __future__ import annotations

import argparse
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpumemlab.recordings.files import load_snapshot  # noqa: E402

REAL = ROOT / "tests" / "fixtures" / "real"
MB = 1e6


def _cli(*args) -> float:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "doctor", *args],
                          capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - t
    if done.returncode not in (0, 1):
        raise SystemExit(f"doctor failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    return elapsed


def json_vs_text(repeats: int) -> None:
    largest = max(REAL.glob("*.pickle"), key=lambda p: p.stat().st_size)
    text, js = [], []
    for _ in range(repeats):
        text.append(_cli(str(largest)))
        js.append(_cli("--json", str(largest)))
    print(f"doctor on {largest.name} ({largest.stat().st_size / MB:.1f} MB): text best "
          f"{min(text):.2f} s, --json best {min(js):.2f} s, ratio json/text "
          f"{min(js) / min(text):.2f} (target <= 1.2)")


def _grown(snapshot: dict, target_bytes: int, folder: Path) -> Path:
    trace = snapshot["device_traces"][0]
    one = len(pickle.dumps(snapshot, protocol=4))
    copies = max(1, round(target_bytes / max(one, 1)))
    grown = dict(snapshot)
    # new entry dicts, the same frame lists: the memo references of a real file, at scale
    grown["device_traces"] = [[dict(e) for _ in range(copies) for e in trace]]
    path = folder / f"grown_{target_bytes // 1_000_000}MB.pickle"
    path.write_bytes(pickle.dumps(grown, protocol=4))
    return path


def load_scaling(sizes_mb, repeats: int) -> None:
    source = max(REAL.glob("*.pickle"), key=lambda p: p.stat().st_size)
    snapshot = load_snapshot(source)
    per_mb = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes_mb:
            path = _grown(snapshot, int(size * MB), Path(tmp))
            mb = path.stat().st_size / MB
            best = plain = float("inf")
            data = path.read_bytes()
            for _ in range(repeats):
                t = time.perf_counter()
                load_snapshot(path)
                best = min(best, time.perf_counter() - t)
                t = time.perf_counter()
                pickle.loads(data)       # the baseline: a trusting load of the same bytes
                plain = min(plain, time.perf_counter() - t)
            del data
            per_mb.append(best / mb)
            print(f"load_snapshot of {mb:.0f} MB (from {source.name}'s shape): best {best:.2f} s, "
                  f"{best / mb * 1000:.1f} ms per MB; plain pickle.loads {plain:.2f} s; "
                  f"ratio to it {best / plain:.2f}")
            path.unlink()
    print(f"per-MB time, largest / smallest file: {per_mb[-1] / per_mb[0]:.2f} (linear: ~1)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes-mb", default="25,100")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    json_vs_text(args.repeats)
    load_scaling([float(s) for s in args.sizes_mb.split(",")], args.repeats)


if __name__ == "__main__":
    main()
