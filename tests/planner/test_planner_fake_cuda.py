"""gml.plan on fake CUDA tensors (in a fresh process: the library is loaded before torch): the
offload lever's bytes moved per step, derived by hand, its transfer times, and its pinned host
bytes (each saved tensor its own pinned request, rounded as CachingHostAllocator rounds, with and
without pinned_max_round_threshold_mb), and a host budget that fails the plan. Needs a C++
compiler for the fake-CUDA library (skipped without one; a build that fails is a failure)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, D = 3072, 256      # x is 3 MiB: not a power of two, so rounding shows

CODE = f"""
import json
from gpumemlab.recordings import fake_cuda
assert fake_cuda.preload()
import torch, gpumemlab as gml
model = lambda: torch.nn.Sequential(torch.nn.Linear({D}, {D}), torch.nn.ReLU(), torch.nn.Linear({D}, {D}))
p = gml.plan(model, lambda ps: torch.optim.AdamW(ps), ({B}, {D}), total_memory="1GiB",
             context_bytes="64MiB", batch_size={B}, steps=2, largest_batch=False, settings=False)
kw = dict(total_memory="1GiB", context_bytes="64MiB", batch_size={B}, steps=2, largest_batch=False,
          settings=False, levers=False, offload="activations")
cut = gml.plan(model, lambda ps: torch.optim.AdamW(ps), ({B}, {D}),
               alloc_conf="pinned_max_round_threshold_mb:2", **kw)
short = gml.plan(model, lambda ps: torch.optim.AdamW(ps), ({B}, {D}), host_memory="12MiB", **kw)
print(json.dumps({{"label": p.label, "levers": p.as_dict()["levers"], "cut": cut.as_dict(),
                  "short": short.as_dict(), "short_text": short.report()}}))
"""


@pytest.fixture(scope="module")
def result(library):
    run = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_offload_moves_what_autograd_saves(result):
    assert result["label"] == "fake CUDA tensors"
    levers = {o["name"]: o for o in result["levers"]}
    off = levers["offload saved tensors to CPU"]
    # saved for backward, by hand: the first Linear keeps its input x (its weight is not needed:
    # x wants no gradient); ReLU keeps its output r; the second Linear keeps r again (a second
    # copy: each save is packed on its own) and its weight; the mean of the output keeps nothing
    # each goes out in forward and comes back in backward
    assert off["transfer_bytes"] == 2 * (3 * B * D * 4 + D * D * 4)
    assert "ms at PCIe 5 x16" in off["note"] and "ms at NVLink-C2C" in off["note"]
    base = result["levers"][0]
    assert off["peak_allocated_bytes"] < base["peak_allocated_bytes"]


def test_offload_pins_each_saved_tensor_rounded(result):
    off = {o["name"]: o for o in result["levers"]}["offload saved tensors to CPU"]
    x, w = B * D * 4, D * D * 4                  # 3 MiB activations, a 256 KiB weight
    assert x == 3 * 2**20
    # default rounding: each 3 MiB save is its own request, rounded up to 4 MiB
    assert off["host_pinned_bytes"] == 3 * 4 * 2**20 + w
    # pinned_max_round_threshold_mb:2: a 3 MiB request is above it, pinned at its size; the
    # weight (256 KiB, a power of two already) is unchanged
    assert result["cut"]["host_pinned_bytes"] == 3 * x + w
    assert result["cut"]["fits"] is True and result["cut"]["failed"] == []


def test_host_budget_fails_the_plan(result):
    short = result["short"]
    assert short["host_pinned_bytes"] == 12 * 2**20 + D * D * 4 > short["host_memory_bytes"]
    assert short["fits"] is False and short["failed"] == ["host"]
    assert "DOES NOT FIT: host budget, pins 12.25 MiB of 12.00 MiB" in result["short_text"]
    assert "PCIe 5.0: 32 GT/s x 16 lanes" in result["short_text"]
