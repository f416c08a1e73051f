"""On a CUDA machine: record each scenario's real snapshot into tests/fixtures/snapshots/
(one cuda_<scenario>.pickle each).

    python tests/gpu/record_fixtures.py
"""
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(root))

import gpumemlab as gml  # noqa: E402
from gpumemlab import scenarios  # noqa: E402
from gpumemlab.recordings.files import dump_snapshot  # noqa: E402


def main():
    out = root / "tests" / "fixtures" / "snapshots"
    for name, fn in sorted(scenarios.SCENARIOS.items()):
        gpu = gml.CudaGPU("4GiB")
        rec = fn(gpu, release=False)
        print(dump_snapshot(rec.snapshot, out / f"cuda_{name}.pickle"))
        gpu.close()


if __name__ == "__main__":
    main()
