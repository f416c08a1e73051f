"""Capture the allocation trace of real torch code run on the CPU, in the snapshot trace format.

``with gml.capture() as rec:`` around a forward, backward and optimizer step records every tensor
storage that an aten op creates and every storage that dies, in order, with its size in bytes,
the Python frames that asked for it, and a category in the names of PyTorch's memory profiler
(``torch.profiler._memory_profiler.Category``, also what ``torch.cuda._memory_viz.profile_plot``
puts in a trace entry's ``category``): parameter, gradient, activation, optimizer_state,
temporary, input. The result is a trace like ``torch.cuda.memory._snapshot()["device_traces"][0]``
(``alloc``/``free_requested``/``free_completed``), so a learner without a GPU can replay a real
training step on a ``SimulatedGPU`` and see its block map.

How: a ``TorchDispatchMode`` sees each aten op (forward, backward and optimizer ops alike) and its
outputs; a new storage is an output storage no input shares. A ``weakref.finalize`` on the
storage's Python object (kept 1:1 with the C++ StorageImpl by PyTorch) records its free.
Storages that existed before the capture and are used inside it (parameters, inputs, optimizer
state from an earlier step) are listed as allocations at the start of the trace.

``fake=True`` runs the body on fake tensors (``fake.py``: PyTorch's ``FakeTensorMode``), at full
size with no memory behind them, and records the same trace; ``device="cuda"`` records only
storages of that device type (what a GPU recording holds: CPU copies are not GPU memory). On fake
CUDA tensors, the first matrix multiply on each thread (the forward's, autograd's) also records the
cuBLAS workspace that c10 allocates through the caching allocator there, an estimate named in the
entry's ``estimate`` key, category ``workspace`` (``CUBLAS_WORKSPACE_BYTES``).

Not seen: workspace buffers a kernel allocates internally, storages resized in place
(``resize_``, ``set_``), and tensors made without any aten op. Addresses are synthetic
(a bump counter, never reused), so the trace is deterministic.
"""
from __future__ import annotations

import sys
import weakref

from gpumemlab.units import format_size

from .replay import replay
from .torch_objects import (learner_frames, plumbing_files, settled_category, storage_key,
                            tensors_in)

__all__ = ["capture", "Capture", "CATEGORIES"]

CATEGORIES = ("parameter", "gradient", "activation", "optimizer_state", "temporary", "input",
              "workspace")
# c10's cuBLAS workspace per (thread, stream) before Hopper: 4096 KiB x 2 + 16 KiB x 8
# (``getChosenWorkspaceSize`` in CUDABlas); sm90 uses 32 MiB + 128 KiB. Pass another figure as
# capture(..., workspace_bytes=...).
CUBLAS_WORKSPACE_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
_MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addmv", "mv", "addbmm", "_addmm_activation",
                      "_scaled_mm", "addmm_", "baddbmm_"})
_ADDRESS_BASE = 0x100000000
_ALIGN = 512


class Capture:
    """The trace recorded by ``capture()``; use ``snapshot()``, ``replay()`` or ``entries``."""

    # Tells gml.replay to take this as a workload (alloc/free sequence) rather than a recording
    # whose addresses must be reproduced; replay/ checks the flag instead of importing us.
    is_capture = True

    def __init__(self, model=None, optimizer=None, frames: bool = True, fake=None, device=None,
                 workspace_bytes: int = CUBLAS_WORKSPACE_BYTES):
        self.model, self.optimizer, self.want_frames = model, optimizer, frames
        self.fake = fake           # a FakeSession entered around the body, or None
        self.device_type = device  # record only storages of this device type (None: all)
        self.workspace_bytes = workspace_bytes
        self._workspaces = set()   # threads that have their cuBLAS workspace
        self.prelude = []          # allocations that existed before capture began
        self.entries = []          # trace entries in order
        self._live = {}            # storage key -> [entry, finalizer, phase, alloc_index]
        self._next_addr = _ADDRESS_BASE
        self._phase = "other"
        self._forward_started = False
        self._backward_seen = 0    # number of backward phases so far
        self._leaf_params = {}     # storage key -> weakref to a leaf tensor that requires grad
        self._hooks = []
        self._mode = None
        self._active = False
        self._frame_cache = {}
        self._skip_files = plumbing_files()
        self._metadata = ""        # what torch.cuda.memory._set_memory_metadata would hold
        self.flops = None          # set to 0 to count floating-point operations

    # --- the public record -----------------------------------------------------------
    @property
    def trace(self) -> list:
        """All trace entries: pre-existing allocations first, then the recorded events."""
        return self.prelude + self.entries

    def snapshot(self) -> dict:
        """A ``_snapshot()``-shaped dict holding the trace (no segments: the CPU has none)."""
        trace = self.trace
        for i, entry in enumerate(trace):
            entry["time_us"] = i   # a logical clock, like the simulator's
        return {"segments": [], "device_traces": [trace], "allocator_settings": {},
                "external_annotations": []}

    @property
    def allocations(self) -> int:
        return sum(1 for e in self.trace if e["action"] == "alloc")

    def bytes_by_category(self) -> dict:
        """Total bytes allocated per category over the whole trace."""
        out = {c: 0 for c in CATEGORIES}
        for e in self.trace:
            if e["action"] == "alloc":
                out[e["category"]] = out.get(e["category"], 0) + e["size"]
        return out

    def peak_live_bytes(self) -> int:
        """The most bytes alive at once (storage sizes, no allocator rounding)."""
        live = peak = 0
        for e in self.trace:
            if e["action"] == "alloc":
                live += e["size"]
                peak = max(peak, live)
            elif e["action"] == "free_completed":
                live -= e["size"]
        return peak

    def set_memory_metadata(self, metadata: str) -> None:
        """Tag the entries recorded from now on (``user_metadata``), as
        ``torch.cuda.memory._set_memory_metadata`` does on a GPU; "" stops tagging. ``gml.growth``
        reads the tags as iteration marks: call it with ``f"step {i}"`` at the top of a loop."""
        if not isinstance(metadata, str):
            raise TypeError(f"metadata must be a str, not {type(metadata).__name__}")
        self._metadata = metadata

    def new_step(self, metadata: str) -> None:
        """Tag what follows as a new step (``set_memory_metadata``) whose batch, made before the
        model's forward, counts as input again."""
        self.set_memory_metadata(metadata)
        self._forward_started = False

    def replay(self, gpu=None, **kwargs):
        """Run this workload on a simulated GPU (``gml.replay(self, gpu=gpu, ...)``)."""
        return replay(self, gpu=gpu, **kwargs)

    def __repr__(self):
        return (f"<Capture: {self.allocations} allocations, {len(self.trace)} trace entries, "
                f"peak {format_size(self.peak_live_bytes())} live>")

    # --- context manager -----------------------------------------------------------------
    def __enter__(self):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        rec = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return rec._on_op(func, args, kwargs or {})

        self._torch = torch
        if self.fake is not None:
            self.fake.__enter__()
        self._active = True
        self._register_known()
        self._install_hooks()
        self._mode = _Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        if self.fake is not None:
            self.fake.__exit__(*exc)
        self._active = False
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        self._close_phase("other")
        self._resolve_grads()
        for rec in self._live.values():
            rec[1].detach()
            if rec[0]["category"] is None:
                rec[0]["category"] = settled_category(rec[2], alive=True, outlived=False)
        self._live.clear()
        self.model = self.optimizer = None   # do not keep the model alive through the record
        return False

    # --- the dispatch hook ----------------------------------------------------------------
    def _on_op(self, func, args, kwargs):
        torch = self._torch
        if torch._C._current_autograd_node() is not None:
            phase = "backward"
        elif self._phase == "step":
            phase = "step"           # between the optimizer's step hooks
        elif not torch.is_grad_enabled():
            phase = "no_grad"
        elif self.model is not None and not self._forward_started:
            phase = "pre"            # before the model's first forward: the batch, targets
        else:
            phase = "forward"
        if phase != self._phase:
            self._close_phase(phase)
        seen = set()
        dev = self.device_type
        for t in tensors_in(args, kwargs):
            key = storage_key(t)
            if key is None or (dev is not None and t.device.type != dev):
                continue
            seen.add(key)
            if key not in self._live:
                self._adopt(t, key)
            if t.is_leaf and t.requires_grad and key not in self._leaf_params:
                self._leaf_params[key] = weakref.ref(t)
        if (self.fake is not None and self.workspace_bytes and dev == "cuda" and seen
                and func.__name__.split(".")[0] in _MATMULS):   # a CPU matmul makes no workspace
            self._workspace(phase)
        out = func(*args, **kwargs)
        if self.flops is not None:
            self._count_flops(func, args, kwargs, out)
        for t in tensors_in(out, None):
            key = storage_key(t)
            if dev is not None and key is not None and t.device.type != dev:
                continue
            if key is not None and key not in seen and key not in self._live:
                self._record_alloc(t, key, phase, None)
                seen.add(key)
        return out

    def _count_flops(self, func, args, kwargs, out):
        """Floating-point operations by torch.utils.flop_counter's formulas (matmuls, convolutions,
        attention); other ops count 0, as there."""
        from torch.utils.flop_counter import flop_registry
        fn = flop_registry.get(func._overloadpacket)
        if fn is not None:
            self.flops += fn(*args, **kwargs, out_val=out)

    def _workspace(self, phase):
        """The cuBLAS workspace of this thread (autograd's backward runs on its own), made by
        c10 before the thread's first matrix multiply and cached for the life of the process."""
        thread = "backward" if phase == "backward" else "main"
        if thread in self._workspaces:
            return
        self._workspaces.add(thread)
        addr = self._next_addr
        self._next_addr += -(-self.workspace_bytes // _ALIGN) * _ALIGN
        self.entries.append({"action": "alloc", "addr": addr, "size": self.workspace_bytes,
                             "stream": 0, "time_us": 0,
                             "frames": self._frames() if self.want_frames else [],
                             "category": "workspace", "estimate": f"cuBLAS workspace ({thread} thread)",
                             "user_metadata": self._metadata})

    def _adopt(self, t, key):
        """A storage made before the capture: list it as allocated at the start."""
        category = "parameter" if (t.is_leaf and t.requires_grad) else "input"
        self._record_alloc(t, key, "before", category, prelude=True)

    def _record_alloc(self, t, key, phase, category, prelude=False):
        storage = t.untyped_storage()
        nbytes = storage.nbytes()
        addr = self._next_addr
        self._next_addr += max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
        entry = {"action": "alloc", "addr": addr, "size": nbytes, "stream": 0, "time_us": 0,
                 "frames": self._frames() if (self.want_frames and not prelude) else [],
                 "category": category, "user_metadata": "" if prelude else self._metadata}
        (self.prelude if prelude else self.entries).append(entry)
        fin = weakref.finalize(storage, self._on_free, key)
        fin.atexit = False
        self._live[key] = [entry, fin, phase, self._backward_seen]

    def _on_free(self, key):
        rec = self._live.pop(key, None)
        if rec is None or not self._active:
            return
        entry, _fin, phase, backward_at_alloc = rec
        if entry["category"] is None:
            outlived = self._backward_seen > backward_at_alloc or self._phase == "backward"
            entry["category"] = settled_category(phase, alive=False, outlived=outlived)
        # like context="all" on a GPU: the free_requested entry carries the freeing code's frames
        frames = self._frames(2) if self.want_frames else []
        for action, fr in (("free_requested", frames), ("free_completed", [])):
            self.entries.append({"action": action, "addr": entry["addr"], "size": entry["size"],
                                 "stream": 0, "time_us": 0, "frames": fr,
                                 "user_metadata": self._metadata})

    # --- phases and categories ------------------------------------------------------------
    def _close_phase(self, new_phase):
        old = self._phase
        if new_phase == "backward" and old != "backward":
            # what the forward made and still holds when backward starts was saved for it
            for entry, _fin, phase, _b in self._live.values():
                if entry["category"] is None and phase == "forward":
                    entry["category"] = "activation"
        if old == "backward" and new_phase != "backward":
            self._backward_seen += 1
            self._resolve_grads()
        if old in ("step", "no_grad") and new_phase != old:
            self._resolve_step()
        self._phase = new_phase

    def _resolve_grads(self):
        for ref in list(self._leaf_params.values()):
            param = ref()
            # only a leaf has .grad; reading it on a tensor that stopped being one (an in-place op
            # under autograd) makes torch warn in the script's output
            grad = param.grad if param is not None and param.is_leaf else None
            if grad is not None:
                rec = self._live.get(storage_key(grad))
                if rec is not None and rec[0]["category"] in (None, "temporary", "input"):
                    rec[0]["category"] = "gradient"

    def _resolve_step(self):
        """Storages an optimizer step made and kept are its state; the rest were temporaries."""
        state_entries = None
        if self.optimizer is not None:
            state_entries = set()
            for st in self.optimizer.state.values():
                for t in tensors_in(st, None):
                    rec = self._live.get(storage_key(t))
                    if rec is not None:
                        state_entries.add(id(rec[0]))
        for entry, _fin, phase, _b in self._live.values():
            if entry["category"] is None and phase in ("step", "no_grad"):
                keep = state_entries is None or id(entry) in state_entries
                entry["category"] = "optimizer_state" if keep else "temporary"

    def _register_known(self):
        """With a model/optimizer given, list all of their storages up front, by category."""
        if self.model is not None:
            for p in list(self.model.parameters()) + list(self.model.buffers()):
                self._adopt_as(p, "parameter")
                if p.is_leaf and p.grad is not None:
                    self._adopt_as(p.grad, "gradient")
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                for p in group["params"]:
                    self._adopt_as(p, "parameter")
            for st in self.optimizer.state.values():
                for t in tensors_in(st, None):
                    self._adopt_as(t, "optimizer_state")

    def _adopt_as(self, t, category):
        key = storage_key(t)
        if key is not None and self.device_type is not None and t.device.type != self.device_type:
            return
        if key is not None and key not in self._live:
            self._record_alloc(t, key, "before", category, prelude=True)
        if key is not None and t.is_leaf and t.requires_grad:
            self._leaf_params[key] = weakref.ref(t)

    def _install_hooks(self):
        if self.model is not None:
            def pre(_m, _inp):
                self._forward_started = True
            self._hooks.append(self.model.register_forward_pre_hook(pre))
        if self.optimizer is not None:
            self._hooks.append(self.optimizer.register_step_pre_hook(
                lambda *_: self._close_phase("step")))
            self._hooks.append(self.optimizer.register_step_post_hook(
                lambda *_: self._close_phase("other")))

    # --- frames ---------------------------------------------------------------------------
    def _frames(self, depth_above: int = 3):
        return learner_frames(sys._getframe(depth_above), self._frame_cache, self._skip_files)

def capture(model=None, optimizer=None, *, frames: bool = True, fake=False, device=None,
            workspace_bytes: int = CUBLAS_WORKSPACE_BYTES) -> Capture:
    """Record the tensor allocations and frees of torch code run inside ``with``.

    ``model`` and ``optimizer`` are optional: given, their parameters, buffers, gradients and
    optimizer state are listed up front with exact categories, and the forward pass and step are
    known exactly; without them, phases are inferred (grad mode, autograd's current node).
    ``frames=False`` skips the Python frames (faster). ``fake=True`` runs the body on fake tensors
    (``device`` "cuda" where this process can, else "cpu"; or pass a ``gml.fake_tensors()``
    session, e.g. the one the model was built in); with ``fake`` and no ``device``, only storages
    of the session's device are recorded. Returns the ``Capture``.
    """
    session = None
    if fake is True:
        from .fake import fake_tensors
        session = fake_tensors(device or "auto")
    elif fake:
        session = fake
    if session is not None and device is None:
        device = session.device
    return Capture(model=model, optimizer=optimizer, frames=frames, fake=session, device=device,
                   workspace_bytes=workspace_bytes)
