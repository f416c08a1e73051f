"""The small helpers of ``capture.py``: a storage's identity, the tensors inside nested
arguments, the category of an unclaimed allocation, and the files whose frames are plumbing."""
from __future__ import annotations

import os
import weakref

def _settle(phase, alive, outlived):
    """The category of an allocation nobody claimed (not a gradient or optimizer state)."""
    if phase == "forward":
        return "activation" if (alive or outlived) else "temporary"
    if phase in ("before", "pre"):
        return "input"
    return "temporary"


def _key(t):
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
    if storage.nbytes() == 0:
        return None
    return storage._cdata


def _tensors(obj, kwargs):
    import torch
    stack = [obj] if kwargs is None else [obj, kwargs]
    while stack:
        x = stack.pop()
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, dict):
            stack.extend(x.values())


def _skip_files():
    """Files of dispatch plumbing: frames there say nothing about the learner's code."""
    import torch
    root = os.path.dirname(torch.__file__)
    names = ["utils/_python_dispatch.py", "_ops.py", "nn/modules/module.py", "_tensor.py",
             "autograd/__init__.py", "autograd/graph.py", "optim/optimizer.py",
             "utils/_contextlib.py", "overrides.py", "_dynamo/eval_frame.py", "_compile.py"]
    here = os.path.dirname(os.path.abspath(__file__))
    ours = [os.path.join(here, n) for n in ("capture.py", "capture_parts.py", "fake.py")]
    return frozenset([os.path.join(root, n) for n in names] + ours + [weakref.__file__])
