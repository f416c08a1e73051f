"""gml.plan on fake CUDA tensors (in a fresh process: the library is loaded before torch): the
offload lever's bytes moved per step, derived by hand, and its transfer times. Needs a C++
compiler for the fake-CUDA library (skipped without one)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from gpumemlab.recordings import fake_cuda  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, D = 4096, 256

CODE = f"""
import json
from gpumemlab.recordings import fake_cuda
assert fake_cuda.preload()
import torch, gpumemlab as gml
model = lambda: torch.nn.Sequential(torch.nn.Linear({D}, {D}), torch.nn.ReLU(), torch.nn.Linear({D}, {D}))
p = gml.plan(model, lambda ps: torch.optim.AdamW(ps), ({B}, {D}), total_memory="1GiB",
             context_bytes="64MiB", batch_size={B}, steps=2, largest_batch=False, settings=False)
print(json.dumps({{"label": p.label, "levers": p.as_dict()["levers"]}}))
"""


@pytest.fixture(scope="module")
def result():
    try:
        fake_cuda.build()
    except fake_cuda.FakeCudaUnavailable as exc:
        pytest.skip(str(exc))
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
    assert off["transfer_bytes"] == 3 * B * D * 4 + D * D * 4
    assert "ms at PCIe 5 x16" in off["note"] and "ms at NVLink-C2C" in off["note"]
    base = result["levers"][0]
    assert off["peak_allocated_bytes"] < base["peak_allocated_bytes"]
