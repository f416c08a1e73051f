"""Fake tensors for capture: run real torch code at full size without allocating its memory.

``fake_tensors(device)`` enters PyTorch's ``FakeTensorMode`` (``torch._subclasses.fake_tensor``):
every tensor made inside has a shape, dtype, device and storage identity but no data, so a 7 B
parameter step runs on a laptop in seconds, and ``gml.capture`` sees the same storages being born
and dying as on a real card. What the session adds around ``FakeTensorMode``:

* ``device="cuda"``: fake CUDA tensors, which a CPU-only torch allows only with the fake-CUDA
  library loaded before torch (``fake_cuda.py``); ``torch.cuda.is_available`` and
  ``is_bf16_supported`` answer True inside, so ``torch.autocast("cuda")`` runs instead of
  disabling itself. On a CUDA build of torch without a driver the session sets torch's own fake
  CUDA device guard, keeps ``avoid_device_init`` True (``honest_mode_class``) and turns cuDNN
  off, and ``"auto"`` takes the CPU where backward would stop (``fake_cuda.status()``).
  ``device="cpu"``: fake CPU tensors, counted as the GPU by the planner
  (labelled so: the CUDA and CPU kernels can differ, e.g. attention's backend, torch.optim's
  foreach path).
* ``Module.to``/``.cuda()`` on fake parameters: torch swaps the Parameter objects
  (``torch.utils.swap_tensors``), which fake tensors refuse (they carry weakrefs); inside the
  session the module gets new Parameters instead (build the optimizer after ``.to``, as usual).
* torch.optim's foreach path: chosen only for plain Tensor/Parameter types, so fake parameters
  would take the per-tensor loop that a real card does not; inside, they count as plain.
* ``torch.nn.init.trunc_normal_``: torch's version asks ``mask.any()``, which a fake tensor cannot
  answer; inside, it is ``normal_`` then ``clamp_`` (in place, like the real one).
* ``session.module(m)``: a fake copy of a real or ``meta`` module (structure copied, parameters and
  buffers made fake; the original is untouched).
* ``explain(exc)``: one line naming the operation that fake tensors could not run (a data-dependent
  shape, ``.item()``, an operator without a fake kernel) and the usual workaround.
"""
from __future__ import annotations

import contextlib
import copy

from . import fake_cuda

__all__ = ["fake_tensors", "FakeSession", "explain", "is_fake"]


def is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


class FakeSession:
    """A ``FakeTensorMode`` with the patches above; ``device`` is "cuda" or "cpu"."""

    def __init__(self, device: str = "auto", mode=None):
        if device == "auto":   # a training step needs backward: no fake CUDA where it stops
            status = fake_cuda.status()
            device = "cuda" if status["cuda"] and status["backward"] else "cpu"
        if device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda', 'cpu' or 'auto', not {device!r}")
        if device == "cuda" and not fake_cuda.status()["cuda"]:
            raise fake_cuda.FakeCudaUnavailable(
                "fake CUDA tensors are not available in this process: "
                f"{fake_cuda.status()['reason']}; use device='cpu' (counted as the GPU)")
        self.device = device
        self.mode = mode or honest_mode_class()(allow_non_fake_inputs=True)
        self._stacks = []   # one ExitStack per (possibly nested) enter

    @property
    def label(self) -> str:
        return ("fake CUDA tensors" if self.device == "cuda"
                else "fake CPU tensors counted as the GPU (no fake CUDA in this process)")

    def module(self, model):
        """A fake copy of ``model`` (real or meta) on this session's device; ``model`` is untouched."""
        import torch
        memo = {}
        with self.mode:
            for t in list(model.parameters()) + list(model.buffers()):
                if id(t) in memo:
                    continue
                fake = torch.empty_like(t, device=self.device)
                if isinstance(t, torch.nn.Parameter):
                    fake = torch.nn.Parameter(fake, requires_grad=t.requires_grad)
                memo[id(t)] = fake
        return copy.deepcopy(model, memo)

    def __enter__(self):
        import torch
        if self.device == "cuda" and fake_cuda.no_cuda_device():
            # torch's fake guard for CUDA (FakeTensorMode sets it only while is_available() says
            # False, which the patches below and the planner's torch.cuda shim make it say True)
            torch._C._ensureCUDADeviceGuardSet()
        stack = contextlib.ExitStack()
        if self.device == "cuda" and fake_cuda.no_cuda_device():
            # cuDNN's checks read the real devices' capabilities (none): RNNs take the fused-cell
            # path, as on a CPU-only torch, whose meta kernels the planner registers
            stack.enter_context(_cudnn_off())
        # the fake mode first: on a CUDA build without a driver torch's own no-op device guard
        # then carries .to("cuda") and forward before is_available is patched to say True
        stack.enter_context(self.mode)
        if self.device == "cuda":
            stack.enter_context(_patched(torch.cuda, "is_available", lambda: True))
            stack.enter_context(_patched(torch.cuda, "is_bf16_supported", lambda *a, **k: True))
        stack.enter_context(_patched(torch.nn.init, "trunc_normal_", _trunc_normal_))
        stack.enter_context(_foreach_for_fakes())
        if not _ORIGINAL_APPLY:
            _ORIGINAL_APPLY.append(torch.nn.Module.__dict__["_apply"])
        stack.enter_context(_patched(torch.nn.Module, "_apply", _module_apply))
        self._stacks.append(stack)
        return self

    def __exit__(self, *exc):
        # nested use (a capture inside ``with session:``) unwinds its own patches only
        return self._stacks.pop().__exit__(*exc)


def honest_mode_class(base=None):
    """``FakeTensorMode`` (or ``base``, a subclass of it) whose ``avoid_device_init`` is True on a
    CUDA build without a device, whatever ``torch.cuda.is_available`` says (a session patches it to
    say True): else torch would copy a CPU constant to a real CUDA device on ``.to("cuda")``
    (``_to_copy``'s constant propagation), which fails on a machine without a driver."""
    if base is None:
        from torch._subclasses.fake_tensor import FakeTensorMode as base
    if base not in _HONEST:
        def avoid_device_init(self, _base=base):
            return True if fake_cuda.no_cuda_device() else _base.avoid_device_init.fget(self)
        _HONEST[base] = type(base.__name__, (base,), {"avoid_device_init": property(avoid_device_init),
                                                      "__module__": __name__})
    return _HONEST[base]


_HONEST = {}


def fake_tensors(device: str = "auto", mode=None) -> FakeSession:
    """``with gml.fake_tensors("cuda") as fs:``: tensors made inside hold no memory."""
    return FakeSession(device, mode)


@contextlib.contextmanager
def _patched(owner, name, value):
    old = owner.__dict__.get(name, getattr(owner, name))
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


@contextlib.contextmanager
def _cudnn_off():
    import torch
    old = torch.backends.cudnn.enabled
    torch.backends.cudnn.enabled = False
    try:
        yield
    finally:
        torch.backends.cudnn.enabled = old


@contextlib.contextmanager
def _foreach_for_fakes():
    """torch.optim picks its foreach (multi-tensor) path only for plain Tensor/Parameter types; a
    real card's parameters get it, so fake ones must too (its temporaries differ)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.optim import optimizer
    types = optimizer._foreach_supported_types
    added = FakeTensor not in types
    if added:
        types.append(FakeTensor)
    try:
        yield
    finally:
        if added and FakeTensor in types:
            types.remove(FakeTensor)


def _trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    import torch
    with torch.no_grad():
        return tensor.normal_(mean, std, generator=generator).clamp_(a, b)


_ORIGINAL_APPLY = []   # torch's own Module._apply, saved at the first session


def _module_apply(self, fn, recurse=True):
    """``Module._apply`` for fake parameters: new Parameter objects instead of a swap."""
    import torch
    if not any(is_fake(p) for p in self._parameters.values() if p is not None):
        return _ORIGINAL_APPLY[0](self, fn, recurse)
    if recurse:
        for child in self.children():
            child._apply(fn)
    for key, param in self._parameters.items():
        if param is None:
            continue
        with torch.no_grad():
            new = torch.nn.Parameter(fn(param), requires_grad=param.requires_grad)
            if param.grad is not None:
                new.grad = fn(param.grad)
        self._parameters[key] = new
    for key, buf in self._buffers.items():
        if buf is not None:
            self._buffers[key] = fn(buf)
    return self


def explain(exc: BaseException) -> str:
    """One line: which operation fake tensors could not run, and the workaround."""
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    name = type(exc).__name__
    if name in ("DataDependentOutputException", "GuardOnDataDependentSymNode") or \
            "data-dependent" in msg or "item()" in msg or "DataDependent" in msg:
        how = ("the step reads a tensor's value (.item(), .tolist(), a bool of a tensor, or an op "
               "whose output shape depends on data such as nonzero/masked_select/unique): move it "
               "out of the step, or give it a fixed size")
    elif "hasPrimaryContext" in msg and fake_cuda.no_cuda_device():
        how = fake_cuda.NO_BACKWARD
    elif name == "UnsupportedOperatorException" or "no fake" in msg.lower() or \
            "DynamicOutputShapeException" == name:
        how = ("this operator has no fake (meta) kernel in this torch: replace it in the step, or "
               "plan the rest of the step without it")
    else:
        how = ("an error in the step itself, or an operation fake tensors cannot run: run the "
               "step once for real on a small size to tell which")
    return f"fake tensors could not run the step: {name}: {msg[:240]} ({how})"
