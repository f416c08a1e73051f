"""The child process of ``selftest``: one scenario on one fresh device, its summary on stdout.

    python -m gpumemlab.lessons.selftest_worker NAME BUDGET_BYTES [--device cuda|sim] [--snapshot FILE]

On ``cuda`` the device is a ``CudaGPU`` of the budget (``PYTORCH_CUDA_ALLOC_CONF``, set by the
parent, is read by PyTorch at start-up); its statistics are reset before the scenario so both
sides count from zero. Any failure (a CUDA error, a refused budget) is caught and sent back as the
summary's ``error``, with the steps done until then. On ``cuda`` the summary also says what the
CudaGPU took (``budget``) and gave back when closed (``released``). ``--snapshot`` writes the scenario's
snapshot as a pickle (what ``torch.cuda.memory._dump_snapshot`` writes), with its Python stack
frames dropped: they name only this kit's own scenario code, a replay does not read them, and
without them a recording is small enough to commit.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys

from gpumemlab.devices.compare import summary
from gpumemlab.devices.scenarios import ScenarioRecord

_MARK = "GPUMEMLAB-SELFTEST-RESULT "


def _strip_frames(snapshot: dict) -> dict:
    for seg in snapshot.get("segments", []):
        for block in seg.get("blocks", []):
            block.pop("frames", None)
    for trace in snapshot.get("device_traces", []):
        for entry in trace:
            entry.pop("frames", None)
    return snapshot


def _open(device: str, budget: int, conf: str):
    if device == "sim":
        from gpumemlab.devices.simulated import SimulatedGPU
        return SimulatedGPU(budget, alloc_conf=conf, record_frames=False)
    from gpumemlab.devices.cuda import CudaGPU
    gpu = CudaGPU(budget)              # settings come from PYTORCH_CUDA_ALLOC_CONF, at start-up
    gpu.empty_cache()
    gpu.reset_peak_memory_stats()
    gpu.reset_accumulated_memory_stats()
    return gpu


def measure(scenario, gpu, snapshot_path=None) -> dict:
    """Run ``scenario`` on ``gpu``; the summary, with ``error`` set if it failed part way."""
    try:
        rec = scenario.on(gpu)
    except Exception as exc:
        partial = getattr(exc, "gml_record", None) or ScenarioRecord(scenario.name, gpu.kind)
        where = f" at step {len(partial.steps)}" if partial.steps else ""
        first = (str(exc).splitlines() or [""])[0]
        return summary(partial, error=f"{type(exc).__name__}{where}: {first}")
    if snapshot_path is not None:
        with open(snapshot_path, "wb") as f:
            pickle.dump(_strip_frames(rec.snapshot), f, protocol=pickle.DEFAULT_PROTOCOL)
    return summary(rec)


def main(argv=None) -> int:
    from .selftest import by_name
    parser = argparse.ArgumentParser(prog="selftest_worker")
    parser.add_argument("name")
    parser.add_argument("budget", type=int)
    parser.add_argument("--device", choices=("cuda", "sim"), default="cuda")
    parser.add_argument("--snapshot")
    args = parser.parse_args(argv)
    scenario = by_name(args.name)
    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    gpu = None
    try:
        gpu = _open(args.device, args.budget, conf)
        result = measure(scenario, gpu, args.snapshot)
    except Exception as exc:           # no device at all: a refused budget, a busy card, no CUDA
        first = (str(exc).splitlines() or [""])[0]
        result = {"name": args.name, "steps": [], "oom_step": None, "segments": [], "stats": {},
                  "error": f"{type(exc).__name__}: {first}"}
    if gpu is not None and gpu.kind == "cuda":
        result["budget"] = gpu.budget_message      # what it took, and (below) gave back
        try:
            result["released"] = gpu.close()
        except Exception as exc:       # after a CUDA error the context may be unusable
            result["released"] = f"closing the CudaGPU failed: {type(exc).__name__}: {exc}"
    print(_MARK + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
