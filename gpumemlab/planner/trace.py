"""Trace one configuration of a training or inference step on fake tensors: the planner's unit of
work. A ``Setup`` says what to build (model, optimizer, inputs, loss) and a ``Config`` how to run it
(batch size, mixed precision, activation checkpointing, gradient accumulation, steps); ``trace``
builds a fresh fake model and optimizer, runs ``steps`` steps inside ``gml.capture(fake=...)``
(each tagged ``step i`` in ``user_metadata``, as ``torch.cuda.memory._set_memory_metadata`` would)
and returns the ``Capture``.

A step: ``zero_grad(set_to_none=True)``; ``accumulation`` micro-batches of ``batch //
accumulation`` rows, each forward (under ``torch.autocast(dtype=...)`` when ``precision`` is set),
loss divided by ``accumulation``, backward; then ``optimizer.step()``. With no optimizer the step
is inference under ``torch.no_grad()``. Checkpointing wraps the forward of the chosen blocks (the
model's largest ``nn.ModuleList``, or a ``Sequential``'s children) in
``torch.utils.checkpoint.checkpoint(use_reentrant=False)``: their activations are recomputed in
backward; the capture adds up the step's floating-point operations with the formulas of
``torch.utils.flop_counter`` (``capture.flops``), recomputation included: the extra compute a lever
costs. (``FlopCounterMode`` itself is not used: around a checkpointed step it kept the recomputed
activations alive longer, and changed the memory being measured.)
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, replace

from gpumemlab.recordings.capture import capture
from gpumemlab.recordings.fake import explain, fake_tensors, is_fake

__all__ = ["Setup", "Config", "trace", "StepFailed", "blocks_of"]


class StepFailed(ValueError):
    """The step could not run on fake tensors; the message is one line with the workaround."""


@dataclass
class Setup:
    """What to plan. ``model``: an ``nn.Module`` (real, meta or fake; copied as fakes) or a callable
    making one; ``optimizer``: ``params -> Optimizer`` or None (inference); ``inputs``:
    ``batch_size -> tensor or tuple`` (made on the fake device) or a shape tuple, batch first
    (``torch.randn``); ``loss``: ``output -> scalar`` (default: the mean of the first output, in
    float32)."""

    model: object
    optimizer: object = None
    inputs: object = None
    loss: object = None
    device: str = "auto"
    workspace_bytes: int | None = None


@dataclass(frozen=True)
class Config:
    batch_size: int = 1
    precision: str | None = None       # None (as built), "bf16" or "fp16": torch.autocast
    checkpointing: object = None       # None, "full", or a tuple of block indices
    accumulation: int = 1
    steps: int = 3
    offload: bool = False              # saved activations to CPU, as autograd.graph.save_on_cpu

    def label(self) -> str:
        parts = [f"batch {self.batch_size}"]
        if self.precision:
            parts.append(f"{self.precision} autocast")
        if self.checkpointing == "full":
            parts.append("checkpoint every block")
        elif self.checkpointing:
            parts.append(f"checkpoint blocks {list(self.checkpointing)}")
        if self.offload:
            parts.append("saved tensors offloaded to CPU")
        if self.accumulation > 1:
            parts.append(f"accumulate {self.accumulation}x{self.batch_size // self.accumulation}")
        return ", ".join(parts)


def with_(config: Config, **changes) -> Config:
    return replace(config, **changes)


def blocks_of(model) -> list:
    """The repeated blocks: the largest ``nn.ModuleList`` (by parameters), else a ``Sequential``."""
    from torch import nn
    best, best_n = [], -1
    for mod in model.modules():
        if isinstance(mod, nn.ModuleList) and len(mod) > 1:
            n = sum(p.numel() for p in mod.parameters())
            if n > best_n:
                best, best_n = list(mod), n
    if not best and isinstance(model, nn.Sequential):
        best = list(model)
    return best


def _build_model(setup: Setup, fs):
    import torch
    m = setup.model
    if isinstance(m, torch.nn.Module):
        if all(is_fake(p) for p in m.parameters()):
            raise StepFailed("give the planner a real or meta model (or a function making one), "
                             "not one made of fake tensors from another session")
        return fs.module(m)
    if callable(m):
        with fs:
            with torch.device(fs.device):
                built = m()
            if not isinstance(built, torch.nn.Module):
                raise StepFailed(f"model() returned {type(built).__name__}, not an nn.Module")
            return built.to(fs.device)
    raise StepFailed(f"model must be an nn.Module or a function making one, not {type(m).__name__}")


def _make_inputs(setup: Setup, batch: int, device: str):
    import torch
    spec = setup.inputs
    if spec is None:
        raise StepFailed("inputs is missing: a shape tuple (batch first) or a function "
                         "batch_size -> tensor(s)")
    if isinstance(spec, (tuple, list)) and all(isinstance(d, int) for d in spec):
        return (torch.randn((batch,) + tuple(spec[1:]), device=device),)
    with torch.device(device):
        out = spec(batch)
    return out if isinstance(out, tuple) else (out,)


def _loss(setup: Setup, out):
    if setup.loss is not None:
        return setup.loss(out)
    first = out[0] if isinstance(out, (tuple, list)) else out
    return first.float().mean()


def _checkpoint(model, which):
    from torch.utils.checkpoint import checkpoint
    blocks = blocks_of(model)
    if not blocks:
        raise StepFailed("activation checkpointing needs repeated blocks (an nn.ModuleList or a "
                         "Sequential); none found in the model")
    chosen = range(len(blocks)) if which == "full" else which
    for i in chosen:
        if not 0 <= i < len(blocks):
            raise StepFailed(f"checkpointing block {i}: the model has {len(blocks)} blocks")
        blk = blocks[i]
        blk.forward = functools.partial(checkpoint, blk.forward, use_reentrant=False)
    return len(blocks)


def trace(setup: Setup, config: Config, *, frames: bool = False):
    """The ``Capture`` of ``config.steps`` steps of ``setup`` on fresh fake tensors."""
    import torch
    if config.batch_size < 1 or config.accumulation < 1 or config.batch_size % config.accumulation:
        raise StepFailed(f"batch {config.batch_size} does not split into {config.accumulation} "
                         f"equal micro-batches")
    fs = fake_tensors(setup.device)
    try:
        model = _build_model(setup, fs)
        if config.checkpointing:
            _checkpoint(model, config.checkpointing)
        with fs:
            opt = setup.optimizer(model.parameters()) if setup.optimizer else None
        kwargs = {} if setup.workspace_bytes is None else {"workspace_bytes": setup.workspace_bytes}
        micro = config.batch_size // config.accumulation
        rec = capture(model, opt, fake=fs, frames=frames, **kwargs)
        rec.flops = 0   # counted by the capture from here (torch.utils.flop_counter's formulas)
        moved = []                    # per forward under offload: the sizes save_on_cpu packs
        with rec:
            for i in range(config.steps):
                rec.new_step(f"step {i + 1}")
                _one_step(setup, config, model, opt, micro, fs.device, torch, moved)
            rec.set_memory_metadata("")
        rec.offload_bytes_per_step = sum(map(sum, moved)) // config.steps
        # the forward that pins the most: its tensors are all alive at its end (host peak)
        rec.offload_saved_sizes = max(moved, key=sum, default=[])
    except StepFailed:
        raise
    except Exception as exc:  # an op fake tensors cannot run, or the user's code failing
        raise StepFailed(explain(exc)) from None
    _describe(rec, fs, model, opt)
    return rec


def _describe(rec, fs, model, opt):
    """What the planner's cross-checks need to know about the traced model, on the capture."""
    params = list(model.parameters())
    rec.label, rec.device = fs.label, fs.device
    rec.param_count = sum(p.numel() for p in params)
    rec.weight_bytes = params[0].element_size() if params else 4
    rec.optimizer_name = type(opt).__name__ if opt is not None else None
    rec.momentum = bool(opt is not None and any(g.get("momentum") for g in opt.param_groups))
    rec.dims = getattr(model, "dims", None)
    rec.blocks = len(blocks_of(model))


def _one_step(setup, config, model, opt, micro, device, torch, moved):
    if opt is None:
        with torch.no_grad():
            _forward(setup, config, model, micro, device, torch, moved)
        return
    opt.zero_grad(set_to_none=True)
    for _ in range(config.accumulation):
        loss = _forward(setup, config, model, micro, device, torch, moved)
        if config.accumulation > 1:
            loss = loss / config.accumulation
        loss.backward()
        del loss
    opt.step()


def _forward(setup, config, model, micro, device, torch, moved):
    x = _make_inputs(setup, micro, device)
    with contextlib.ExitStack() as stack:
        if config.offload:
            moved.append([])
            stack.enter_context(_offload(torch, moved[-1]))
        if config.precision:
            dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[config.precision]
            stack.enter_context(torch.autocast(device, dtype=dtype))
        return _loss(setup, model(*x))


def _offload(torch, moved):
    """``torch.autograd.graph.save_on_cpu``'s hooks, counting the bytes: every tensor saved for
    backward that is not on the CPU is copied there in the forward and back in the backward
    (weights included, as there). Pinned or not, the host copy holds no device memory; each
    packed tensor's size is appended to ``moved`` (its own pinned request under pin_memory=True)."""
    def pack(t):
        if t.device.type == "cpu":
            return t
        host = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, device="cpu")
        host.copy_(t)
        moved.append(t.numel() * t.element_size())
        return (t.device, host)

    def unpack(packed):
        if isinstance(packed, tuple):
            return packed[1].to(packed[0], non_blocking=True)
        return packed
    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)

