"""``torch.compile`` while ``gpumemlab plan`` runs a script: the model or function is returned as
it is, so the compiled step is planned as the eager one, and each call is counted.

Dynamo does not trace a frame while a ``TorchDispatchMode`` is active (the capture and the fake
tensors are two), so a compiled module would run eagerly anyway, after compile-time work for
nothing. What this changes from a real compiled run: inductor fuses pointwise chains, so a
compiled step usually holds fewer and smaller temporaries (the plan is an upper bound on the
activations of the fused parts), and it keeps its own workspaces and CUDA-graph pools (not seen).
"""
from __future__ import annotations

import contextlib

__all__ = ["eager_compile"]


@contextlib.contextmanager
def eager_compile():
    """Patch ``torch.compile`` for the duration; yields a dict whose ``"calls"`` counts its uses."""
    import torch
    real = torch.compile
    seen = {"calls": 0}

    def compile(model=None, *args, **kwargs):   # noqa: A001 (torch's name)
        seen["calls"] += 1
        if model is None:                        # @torch.compile(mode=...) as a decorator factory
            return lambda fn: fn
        return model

    torch.compile = compile
    try:
        yield seen
    finally:
        torch.compile = real
