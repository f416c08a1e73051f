"""The fake-tensor mode ``gpumemlab plan`` runs an unmodified script under: PyTorch's
``FakeTensorMode`` (``torch._subclasses.fake_tensor``) with three differences a whole training
script needs and a single planned step does not.

* **CPU data stays real.** An op whose tensors are all real CPU tensors, and whose ``device`` (if
  it names one) is the CPU, runs for real: data loading, ``torch.randint`` batch indices used to
  slice a numpy array, tokenisation, a ``DataLoader``'s collate. Only tensors that would live on the
  GPU are fake, and ``.to("cuda")`` of a real CPU tensor makes a fake one. A CPU factory call for
  more than ``REAL_CPU_LIMIT`` bytes stays fake (a model built on the CPU before ``.to("cuda")``
  would otherwise be initialised for real in host memory). Pinning (``pin_memory()``, a
  ``DataLoader(pin_memory=True)``) makes an ordinary CPU copy: page-locked host memory needs a CUDA
  host allocator, and it is not GPU memory; what would have been pinned is counted on the kit's
  host allocator model (``host_ledger``, ``mode.host``) for the host budget.
* **Values read from a fake tensor are placeholders.** ``loss.item()``, ``float(t)``, a ``bool``
  of a tensor (``aten._local_scalar_dense``) have no value to give: the read answers 0 (0.0,
  ``False``), the value of "nothing unusual" for the reads scripts make (a loss to print, GradScaler's
  found-inf count, a non-finite check), and is counted (``placeholder_reads``) so the plan can say
  that a script steering by values ran on made-up ones. A comparison that returns a Python bool
  (``torch.allclose``, ``torch.equal``: a script checking that checkpointing or compile gave the
  same gradients) answers True, its "nothing unusual", counted the same way (``torch.equal`` of
  different shapes is False: that needs no values).
* **Kernels without a meta implementation in torch** get one here, following their CUDA source:
  ``_thnn_fused_gru_cell`` and its backward (aten/src/ATen/native/cuda/RNN.cu: workspace
  ``[batch, 5*hidden]``, gradients ``[batch, 3*hidden]``), which ``nn.GRU`` takes on CUDA without
  cuDNN, where torch's fallback would make a real CUDA tensor.
* ``torch.tensor(data, device="cuda")`` (``data_factories_on_cpu``): see there.
"""
from __future__ import annotations

from .host_ledger import HostLedger
from .time_limit import RETRY_S, PlanTimeLimit

import contextlib
import math
import time

__all__ = ["ScriptFakeMode", "REAL_CPU_LIMIT", "data_factories_on_cpu", "formatted_scalars"]

REAL_CPU_LIMIT = 64 << 20

_registered = []


def _register_meta_kernels():
    """Meta kernels for the fused GRU cell, shapes as RNN.cu makes them (once per process)."""
    if _registered:
        return
    import torch
    lib = torch.library.Library("aten", "IMPL")

    def gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
        workspace = input_gates.new_empty((hx.size(0), hx.size(1) * 5))
        return torch.empty_like(hx, memory_format=torch.contiguous_format), workspace

    def gru_cell_backward(grad_hy, workspace, has_bias):
        hidden = workspace.size(1) // 5
        grad_in = workspace.new_empty((workspace.size(0), hidden * 3))
        grad_hid = workspace.new_empty((workspace.size(0), hidden * 3))
        grad_hx = torch.empty_like(grad_hy, memory_format=torch.contiguous_format)
        if has_bias:
            return grad_in, grad_hid, grad_hx, grad_in.sum(0), grad_hid.sum(0)
        return grad_in, grad_hid, grad_hx, None, None

    for name, fn in (("_thnn_fused_gru_cell", gru_cell),
                     ("_thnn_fused_gru_cell_backward", gru_cell_backward)):
        try:
            lib.impl(name, fn, "Meta")
        except RuntimeError:
            pass   # a torch that has one already
    _registered.append(lib)   # the Library must stay alive for its kernels to stay registered


def _mode_class():
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    from torch.utils._pytree import tree_flatten, tree_leaves, tree_map

    aten = torch.ops.aten

    from gpumemlab.recordings.fake import honest_mode_class

    class ScriptFakeMode(honest_mode_class(FakeTensorMode)):
        def __init__(self, alloc_conf=""):
            super().__init__(allow_non_fake_inputs=True)
            self.placeholder_reads = 0
            self.real_cpu_ops = 0
            self.host = HostLedger(alloc_conf)
            self.ops = 0                # operators dispatched (the time limit's rate)
            self.deadline = None        # time.monotonic() past which the script is stopped

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += 1
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.deadline = time.monotonic() + RETRY_S    # again, if it is swallowed
                raise PlanTimeLimit("operator")
            kwargs = kwargs or {}
            if func in _AGREE and any(isinstance(a, FakeTensor) for a in args[:2]):
                self.placeholder_reads += 1
                return func is not aten.equal.default or args[0].shape == args[1].shape
            if func is aten._local_scalar_dense.default and isinstance(args[0], FakeTensor):
                self.placeholder_reads += 1
                dtype = args[0].dtype
                return False if dtype == torch.bool else (0.0 if dtype.is_floating_point
                                                          or dtype.is_complex else 0)
            pinned = bool(kwargs.get("pin_memory"))
            if pinned:                  # an ordinary CPU tensor, its pinned bytes counted
                kwargs = dict(kwargs, pin_memory=False)
            # one pass over the arguments: most operators have only fake tensors, and then
            # neither the real-CPU test nor the conversion of real tensors is needed
            has_fake = has_real = False
            for a in tree_leaves((args, kwargs)):
                if isinstance(a, torch.Tensor):
                    if isinstance(a, FakeTensor):
                        has_fake = True
                    else:
                        has_real = True
            if not has_fake and _real_cpu(func, args, kwargs):
                self.real_cpu_ops += 1
                if func in _PIN:        # pinned host memory needs a CUDA host allocator
                    return self.host.pin(args[0].clone())
                if func is aten.is_pinned.default:
                    return False
                out = func(*args, **kwargs)    # this mode is off inside its own handler
                return self.host.pin(out) if pinned and isinstance(out, torch.Tensor) else out
            # a real CPU tensor going to the GPU (``.to("cuda")``, ``copy_``) becomes a fake one
            # first: FakeTensorMode runs an op with no fake input for real, on a CUDA it lacks
            if has_real:
                args, kwargs = tree_map(self._fake_of, (args, kwargs))
            out = super().__torch_dispatch__(func, types, args, kwargs)
            return self.host.pin(out) if pinned and isinstance(out, torch.Tensor) else out

        def _fake_of(self, a):
            if isinstance(a, torch.Tensor) and not isinstance(a, FakeTensor):
                # not as a constant: FakeTensorMode runs ops on constants for real (a CUDA copy)
                return self.from_tensor(a)
            return a

    _PIN = {aten._pin_memory.default}
    _AGREE = {aten.allclose.default, aten.equal.default}

    def _real_cpu(func, args, kwargs):
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        for t in tensors:
            if isinstance(t, FakeTensor) or t.device.type != "cpu":
                return False
        device = kwargs.get("device")
        if device is not None and torch.device(device).type != "cpu":
            return False
        if not tensors:                 # a factory: real only when small
            if device is None and func.__name__.split(".")[0] not in _CPU_DEFAULT_FACTORIES:
                return False
            return _factory_bytes(func, args, kwargs) <= REAL_CPU_LIMIT
        return True

    def _factory_bytes(func, args, kwargs):
        """Bytes the factory makes, from its schema's ``size`` (or ``n`` of randperm/eye, the
        ``end`` of arange); unknown counts as too big (it stays fake)."""
        named = {a.name: (args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
                 for i, a in enumerate(func._schema.arguments) if not a.kwarg_only}
        named.update(kwargs)
        if "size" in named:
            size = named["size"]
        elif "n" in named:
            size = [named["n"], named.get("m") or named["n"]] if "eye" in func.__name__ \
                else [named["n"]]
        elif "end" in named:
            size = [math.ceil(abs((named["end"] - (named.get("start") or 0))
                                  / (named.get("step") or 1)))]
        elif func.__name__.split(".")[0] == "scalar_tensor":
            size = []
        else:
            return REAL_CPU_LIMIT + 1
        if not isinstance(size, (list, tuple)) or not all(isinstance(d, int) for d in size):
            return REAL_CPU_LIMIT + 1
        dtype = named.get("dtype") or torch.get_default_dtype()
        return math.prod(size) * torch.empty((), dtype=dtype, device="meta").element_size()

    return ScriptFakeMode


# factories that make a CPU tensor when no device is given (the default device is the CPU; a
# script's torch.set_default_device passes its device explicitly through its function mode)
_CPU_DEFAULT_FACTORIES = {"empty", "zeros", "ones", "full", "rand", "randn", "randint", "randperm",
                          "arange", "linspace", "logspace", "scalar_tensor", "empty_strided",
                          "eye", "normal", "lift_fresh", "_to_copy", "tensor"}

_CLASS = []


def ScriptFakeMode(alloc_conf=""):   # noqa: N802 (a class made on first use: torch is imported late)
    """A new mode instance (the class is built once torch is imported); ``alloc_conf``'s pinned
    settings round the host requests it counts."""
    if not _CLASS:
        _register_meta_kernels()
        _CLASS.append(_mode_class())
    return _CLASS[0](alloc_conf)


def _non_cpu(device) -> bool:
    import torch
    return device is not None and torch.device(device).type != "cpu"


@contextlib.contextmanager
def data_factories_on_cpu():
    """``torch.tensor(data, device="cuda")`` and ``torch.as_tensor``: torch builds the tensor on the
    CPU and copies it to the device with the Python dispatch key excluded
    (``internal_new_from_data`` in torch/csrc/utils/tensor_new.cpp), out of the fake mode's sight,
    which a CPU-only torch cannot do; here the CPU tensor is made, then moved with ``.to`` (which
    the fake mode sees). C++ indexing with a list (``t[:, [-1]]``) makes the same hidden copy, so a
    flat list of ints indexing a device tensor is turned into an index tensor moved with ``.to``
    first (same result, same memory)."""
    import torch
    real_tensor, real_as_tensor = torch.tensor, torch.as_tensor
    real_getitem = torch.Tensor.__getitem__

    def _int_list(item) -> bool:
        return isinstance(item, list) and bool(item) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in item)

    def getitem(self, index):
        if self.device.type != "cpu":
            if _int_list(index):
                index = real_tensor(index).to(self.device)
            elif isinstance(index, tuple) and any(_int_list(i) for i in index):
                index = tuple(real_tensor(i).to(self.device) if _int_list(i) else i
                              for i in index)
        return real_getitem(self, index)

    def tensor(data, *args, device=None, **kwargs):
        if not _non_cpu(device):
            return real_tensor(data, *args, device=device, **kwargs)
        grad = kwargs.pop("requires_grad", False)
        out = real_tensor(data, *args, **kwargs).to(device)
        return out.requires_grad_(grad) if grad else out

    def as_tensor(data, dtype=None, device=None):
        if not _non_cpu(device):
            return real_as_tensor(data, dtype=dtype, device=device)
        return real_as_tensor(data, dtype=dtype).to(device)

    # TorchScript compiles a call to ``torch.tensor`` as the builtin ``aten::tensor``, found by
    # the function's id; a stand-in it does not know it would try to compile as Python (and
    # fail on ``*args``), as importing ``torch.distributed.optim`` does (its functional
    # optimizers are TorchScript classes)
    from torch.jit._builtins import _register_builtin
    _register_builtin(tensor, "aten::tensor")
    _register_builtin(as_tensor, "aten::as_tensor")
    torch.tensor, torch.as_tensor = tensor, as_tensor
    torch.Tensor.__getitem__ = getitem
    try:
        yield
    finally:
        torch.tensor, torch.as_tensor = real_tensor, real_as_tensor
        torch.Tensor.__getitem__ = real_getitem


@contextlib.contextmanager
def formatted_scalars():
    """``f"{loss:.4f}"`` of a 0-dim fake tensor: ``Tensor.__format__`` formats a 0-dim tensor's
    ``item()`` only when its type is exactly ``Tensor``, so for a ``FakeTensor`` it fell to
    ``object.__format__``, which refuses a format spec (TypeError: llm.c/train_gpt2.py prints its
    gradient norm so). Here a 0-dim tensor of any type formats its ``item()``: a placeholder 0 for
    a fake one, counted as a read."""
    import torch
    real_format = torch.Tensor.__format__

    def format_(self, spec):
        if spec and self.dim() == 0 and not self.is_meta:
            return self.item().__format__(spec)
        return real_format(self, spec)

    torch.Tensor.__format__ = format_
    try:
        yield
    finally:
        torch.Tensor.__format__ = real_format
