"""Planner speed: a 7 B-parameter GPT step (32 layers, hidden 4096, 32 heads, 2048 tokens, vocab
32000; fp32 weights, AdamW) traced on fake tensors and planned on an 80 GiB card.

Run: python benchmarks/bench_planner.py [--layers N] [--device cuda|cpu|auto] [--levers]
Prints the parameter count, the trace time and size, the replay time, the time of a plan (fits,
per-step peaks, smallest card; ``--levers`` adds the levers, each a trace and replay) and its
figures. The target (issue 21) is a 7 B step traced and planned in under a minute on one core.
Fake CUDA tensors are used where the library builds (it is loaded before torch, as here).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from gpumemlab.recordings import fake_cuda  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--levers", action="store_true")
    args = ap.parse_args()
    t = time.perf_counter()
    cuda = fake_cuda.preload() if args.device in ("auto", "cuda") else False
    t_lib = time.perf_counter() - t

    import torch
    torch.set_num_threads(1)
    import gpumemlab as gml
    from gpumemlab.planner.models import gpt, parameter_count
    from gpumemlab.planner.trace import Config, Setup, trace
    from gpumemlab.units import format_size

    dims = dict(layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
                vocab=args.vocab)
    make = lambda: gpt(**dims)  # noqa: E731
    tokens = lambda b: torch.randint(0, args.vocab, (b, args.seq))  # noqa: E731
    adamw = lambda p: torch.optim.AdamW(p)  # noqa: E731
    print(f"model: {parameter_count(**dims):,} parameters; fake CUDA: {cuda} "
          f"(library loaded in {t_lib:.1f} s)")

    t = time.perf_counter()
    rec = trace(Setup(model=make, optimizer=adamw, inputs=tokens, device=args.device),
                Config(batch_size=args.batch, steps=2))
    t_trace = time.perf_counter() - t
    print(f"trace (2 steps, {rec.label}): {t_trace:.1f} s, {len(rec.trace):,} entries")
    t = time.perf_counter()
    r = gml.replay(rec, total_memory="80GiB")
    print(f"replay: {time.perf_counter() - t:.2f} s, peak allocated {format_size(r.peak_allocated)},"
          f" peak reserved {format_size(r.peak_reserved)}, OOM: {r.oom is not None}")

    t = time.perf_counter()
    p = gml.plan(make, adamw, tokens, total_memory="80GiB", batch_size=args.batch, steps=2,
                 device=args.device, levers=args.levers, largest_batch=False, settings=False)
    t_plan = time.perf_counter() - t
    print(f"plan ({'with' if args.levers else 'without'} levers): {t_plan:.1f} s")
    print(p.report())
    print(f"\ntraced and planned: {t_trace + t_plan:.1f} s (target: under 60 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
