"""What a capture reads off torch's objects: a storage's identity, the tensors inside an op's
nested arguments, the files of dispatch plumbing whose frames say nothing about the learner's code,
the learner's frames above a call, and the category an allocation nobody claimed settles into
(in the names of ``torch.profiler._memory_profiler.Category``). ``capture.py`` keeps the record."""
from __future__ import annotations

import os
import weakref

MAX_FRAMES = 8


def settled_category(phase, alive, outlived):
    """The category of an allocation nobody claimed (not a gradient or optimizer state)."""
    if phase == "forward":
        return "activation" if (alive or outlived) else "temporary"
    if phase in ("before", "pre"):
        return "input"
    return "temporary"


def storage_key(t):
    """The identity of ``t``'s storage (its StorageImpl), or None for none or an empty one."""
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError, AttributeError):
        return None
    if storage.nbytes() == 0:
        return None
    return storage._cdata


def tensors_in(obj, kwargs):
    """Every tensor inside ``obj`` (and ``kwargs``), through lists, tuples and dict values."""
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


def plumbing_files():
    """Files of dispatch plumbing: frames there say nothing about the learner's code."""
    import torch
    root = os.path.dirname(torch.__file__)
    names = ["utils/_python_dispatch.py", "_ops.py", "nn/modules/module.py", "_tensor.py",
             "autograd/__init__.py", "autograd/graph.py", "optim/optimizer.py",
             "utils/_contextlib.py", "overrides.py", "_dynamo/eval_frame.py", "_compile.py"]
    here = os.path.dirname(os.path.abspath(__file__))
    ours = [os.path.join(here, n) for n in ("capture.py", "torch_objects.py", "fake.py")]
    return frozenset([os.path.join(root, n) for n in names] + ours + [weakref.__file__])


def learner_frames(f, cache: dict, skip: frozenset) -> list:
    """Up to ``MAX_FRAMES`` frames from ``f`` outwards, as trace frames, skipping ``skip``'s files;
    ``cache`` shares one dict per (code, file, line) between entries."""
    out = []
    depth = 0
    while f is not None and len(out) < MAX_FRAMES and depth < 64:
        code = f.f_code
        if code.co_filename not in skip:
            # code objects compare equal across files (IPython cells with the same text)
            k = (code, code.co_filename, f.f_lineno)
            fr = cache.get(k)
            if fr is None:
                fr = cache[k] = {"filename": code.co_filename, "line": f.f_lineno,
                                 "name": code.co_name}
            out.append(fr)
        f = f.f_back
        depth += 1
    return out
